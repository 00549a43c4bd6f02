"""The report's SVG plots, drawn with matplotlib: throughput per step per arm and repeat, cost per
million tokens per arm (whole attempt and steady state), and a timeline per fault.

Guarantees: each plot has a title, ticks and a label with its unit on both axes, and its legends
outside the data on the right; colour tells arms apart and the dash pattern repeats; the warm-up
steps are a shaded band; fault labels are staggered so neighbours do not overlap. The same input
gives byte-identical SVG (``drawn``). matplotlib is imported only when a plot is drawn, so
``python -m bench`` and ``report --no-plots`` run without it. The data elements carry ``gid``s
(``SERIES``, ``BAR``, ``FAULT``, ``PLOT_AREA``) that tests find them by.
"""

from __future__ import annotations

import functools
import io
from datetime import datetime
from typing import TYPE_CHECKING, Callable

from .artifacts import Collected
from .checks import TOKENS

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

STYLE = {"svg.hashsalt": "moe-rl-platform", "svg.fonttype": "none", "axes.axisbelow": True,
         "axes.grid": True, "grid.color": "#e5e5e5", "legend.frameon": False}
"""On top of matplotlib's own defaults (a user's matplotlibrc is not read): SVG element ids from a
fixed salt, and text as ``<text>`` elements rather than glyph paths (the bytes then depend on the
matplotlib version alone, which requirements.txt pins)."""

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
DASHES = ("-", "--", ":", "-.", (0, (4, 4)))
"""One line style per repeat, so the repeats of an arm are told apart."""
SIZE = (8.6, 3.6)
"""Figure size in inches (the SVG is 72 points per inch)."""
SERIES, BAR, FAULT = "series", "bar", "fault"
"""``gid`` prefixes: ``series:<arm>:r<repeat>`` (``series:r<repeat>`` on the fault timeline),
``bar:<arm>:<cost kind>``, ``fault:<fault kind>:r<repeat>:<event>`` and ``fault-label:<fault kind>``."""
SIMULATED_LABEL = "Made by the simulator, not measured"
PLOT_AREA = "plot-area"
"""``gid`` of the axes' background, whose bounds are the plot area's."""
STAGGER = 0.2
"""Fault labels closer than this share of the x range go on different rows."""


def drawn(draw: Callable[..., Figure]) -> Callable[..., str]:
    """``draw`` run under ``STYLE``, its figure written as SVG with no date: the same input, the same bytes.
    ``simulated``: the figure says above its plot that the simulator made it (the SVG is read alone)."""
    @functools.wraps(draw)
    def svg(*args, simulated: bool = False, **kwargs) -> str:
        import matplotlib.style
        with matplotlib.style.context(["default", STYLE]):
            fig = draw(*args, **kwargs)
            if simulated:
                fig.suptitle(SIMULATED_LABEL, color="tab:red", fontweight="bold", gid="simulated")
            out = io.StringIO()
            fig.savefig(out, format="svg", bbox_inches="tight", metadata={"Date": None})
        return out.getvalue()
    return svg


def figure(title: str, xlabel: str, ylabel: str) -> tuple[Figure, Axes]:
    """One plot area of ``SIZE`` on an Agg canvas (no pyplot: no global figure to close)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=SIZE)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.patch.set_gid(PLOT_AREA)
    return fig, ax


def legends(ax: Axes, groups: dict[str, list]) -> None:
    """One legend per group, titled by its key, stacked top-down just right of the plot area."""
    from matplotlib.legend import Legend
    renderer, height = ax.figure.canvas.get_renderer(), ax.get_window_extent().height
    top = 1.0
    for title, handles in groups.items():
        leg = Legend(ax, handles, [h.get_label() for h in handles], title=title, loc="upper left",
                     bbox_to_anchor=(1.01, top), alignment="left")
        leg.set_gid(f"legend:{title}")
        ax.add_artist(leg)
        leg.set_clip_on(False)  # add_artist clips to the plot area, which the legend is outside of
        top -= leg.get_window_extent(renderer).height / height + 0.03


def _count_axis(ax: Axes) -> None:
    """The y axis from 0, its ticks with thousands separators."""
    from matplotlib.ticker import StrMethodFormatter
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.set_ylim(bottom=0)


def _throughput_series(arms: dict[str, list[Collected]]) -> dict[tuple[str, int], list[tuple[int, float]]]:
    """Per (arm, repeat): (rollout step, tokens/s of the whole rollout pool)."""
    out = {}
    for name, cs in arms.items():
        for c in cs:
            gpus = c.rollout_gpus()
            out[(name, c.attempt.repeat)] = sorted((s.rollout_id, s.metrics[TOKENS] * gpus)
                                                   for s in c.log.first().values() if TOKENS in s.metrics)
    return out


@drawn
def throughput_svg(arms: dict[str, list[Collected]], warmup: int) -> Figure:
    """Per arm (colour) and repeat (line style) the rollout throughput of each step, warm-up shaded."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    series = _throughput_series(arms)
    fig, ax = figure("Rollout throughput per step (whole rollout pool)", "rollout step", "tokens/s")
    first = min((x for pts in series.values() for x, _ in pts), default=0)
    repeats = sorted({rep for _, rep in series})
    styles = [Line2D([], [], color="#555555", linestyle=DASHES[(r - 1) % len(DASHES)], label=f"r{r}")
              for r in repeats]
    if warmup:
        ax.axvspan(first - 0.5, first + warmup - 0.5, color="#bbbbbb", alpha=0.35, linewidth=0, gid="warm-up")
        styles.append(Patch(color="#bbbbbb", alpha=0.35, label=f"warm-up ({warmup} steps)"))
    colours = []
    for i, name in enumerate(arms):
        colour = COLOURS[i % len(COLOURS)]
        colours.append(Line2D([], [], color=colour, label=name))
        for (arm, rep), pts in sorted(series.items()):
            if arm == name:
                ax.plot([x for x, _ in pts], [y for _, y in pts], color=colour, linewidth=1.2, alpha=0.85,
                        linestyle=DASHES[(rep - 1) % len(DASHES)], gid=f"{SERIES}:{name}:r{rep}")
    _count_axis(ax)
    legends(ax, {"arm": colours, "repeat": styles})
    return fig


@drawn
def cost_svg(report: dict) -> Figure:
    """Per arm a bar for the whole attempt's and one for the steady state's cost per million tokens,
    each labelled with its figure; "no price" where the arm has none."""
    from matplotlib.patches import Patch
    vals = {n: (a["usd_per_million_tokens"], a["steady_usd_per_million_tokens"]) for n, a in report["arms"].items()}
    fig, ax = figure("Cost per million generated tokens", "arm", "USD / M tokens")
    kinds = ("whole attempt", "steady state")
    width = 0.38
    for i, (name, pair) in enumerate(vals.items()):
        for k, (kind, v) in enumerate(zip(kinds, pair)):
            x = i + (k - 0.5) * width
            if v is None:
                ax.text(x, 0, "no price", ha="center", va="bottom", rotation=90)
                continue
            bars = ax.bar(x, v, width, color=COLOURS[k], alpha=1 - 0.4 * k, gid=f"{BAR}:{name}:{kind}")
            ax.bar_label(bars, fmt="{:,.3f}", padding=2)
    ax.set_xticks(range(len(vals)), list(vals))
    ax.set_xlim(-0.6, max(len(vals), 1) - 0.4)
    ax.set_ylim(0, max((v for pair in vals.values() for v in pair if v), default=1) * 1.15)  # room for the labels
    ax.grid(False, axis="x")
    legends(ax, {"cost over": [Patch(color=COLOURS[k], alpha=1 - 0.4 * k, label=kind) for k, kind in enumerate(kinds)]})
    return fig


EVENTS = {"killedAt": ("killed", "-"), "runDetectedAt": ("run-reacted", "--"),
          "platformDetectedAt": ("platform-reacted", ":")}
"""The fault figures' times that are drawn (``bench.recovery``: the kill, the run's and the platform's first
reactions), with their name (in the drawn lines' ids; the legend's with spaces) and line style."""


def _fault_points(attempts: list[Collected], figures: dict[str, list[dict]]
                  ) -> tuple[list[tuple[float, float, int]], list[tuple[float, int, str, str]]]:
    """(seconds since start, tokens/s, repeat) per step, and (seconds, repeat, fault kind, event) per
    kill and reaction (``figures``: the report's fault figures by attempt folder)."""
    pts, marks = [], []
    for c in attempts:
        t0, gpus, rep = c.start, c.rollout_gpus(), c.attempt.repeat
        pts += [((s.at - t0).total_seconds(), s.metrics[TOKENS] * gpus, rep)
                for s in c.log.steps if s.at and TOKENS in s.metrics]
        marks += [((datetime.fromisoformat(f[key].replace("Z", "+00:00")) - t0).total_seconds(), rep, f["kind"], event)
                  for f in figures.get(c.attempt.folder, []) for key, (event, _) in EVENTS.items() if f.get(key)]
    return pts, sorted(marks)


def _fault_labels(ax: Axes, marks: list[tuple[float, int, str, str]], span: float) -> None:
    """Each fault kind named once, at its first injection; labels closer than ``STAGGER`` of the span
    go on different rows."""
    firsts = sorted({kind: x for x, _, kind, _ in reversed(marks)}.items(), key=lambda kv: kv[1])
    placed: list[float] = []
    for kind, x in firsts:
        row = sum(1 for q in placed if abs(q - x) < STAGGER * span) % 6
        placed.append(x)
        ax.text(x, 0.97 - 0.09 * row, f" {kind}", va="top", transform=ax.get_xaxis_transform(),
                backgroundcolor="white", gid=f"{FAULT}-label:{kind}")


@drawn
def faults_svg(attempts: list[Collected], figures: dict[str, list[dict]]) -> Figure:
    """Throughput per step against time per repeat (colour), and a vertical line per kill (solid), the run's
    first reaction (dashed) and the platform's (dotted) in the repeat's colour."""
    from matplotlib.lines import Line2D
    pts, marks = _fault_points(attempts, figures)
    fig, ax = figure("Fault timeline: throughput per step", "seconds since the attempt's RayJob started",
                     "tokens/s")
    style = {event: dash for event, dash in EVENTS.values()}
    repeats = sorted({p[2] for p in pts} | {m[1] for m in marks})
    for rep in repeats:
        colour = COLOURS[(rep - 1) % len(COLOURS)]
        mine = [(x, y) for x, y, r in pts if r == rep]
        ax.scatter([x for x, _ in mine], [y for _, y in mine], s=4, color=colour, gid=f"{SERIES}:r{rep}")
        for x, _, kind, event in (m for m in marks if m[1] == rep):
            ax.axvline(x, color=colour, linestyle=style[event], linewidth=1, gid=f"{FAULT}:{kind}:r{rep}:{event}")
    span = max([p[0] for p in pts] + [m[0] for m in marks] + [1])
    ax.set_xlim(0, span * 1.02)
    _fault_labels(ax, marks, span)
    _count_axis(ax)
    legends(ax, {"repeat": [Line2D([], [], color=COLOURS[(r - 1) % len(COLOURS)], marker="o", label=f"r{r}")
                            for r in repeats],
                 "fault": [Line2D([], [], color="#555555", linestyle=dash, label=event.replace("-", " "))
                           for event, dash in EVENTS.values()]})
    return fig
