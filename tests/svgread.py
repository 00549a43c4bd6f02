"""Reading matplotlib's SVG back as XML (for test_bench_plots and test_acceptance): elements by the
``gid`` they were drawn with, the text under them, a path's points, and the ticks of an axis."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Callable

NUMBER = re.compile(r"^-?[0-9][0-9,]*(\.[0-9]+)?$")


def by_id(root: ET.Element, prefix: str) -> dict[str, ET.Element]:
    """Elements under ``root`` whose id starts with ``prefix``, in document order."""
    return {g.get("id"): g for g in root.iter() if (g.get("id") or "").startswith(prefix)}


def one(root: ET.Element, gid: str) -> ET.Element:
    (el,) = [g for g in root.iter() if g.get("id") == gid]
    return el


def texts(el: ET.Element) -> list[str]:
    return [t.text for t in el.iter() if t.tag.endswith("text")]


def points(el: ET.Element) -> list[tuple[float, float]]:
    """The vertices of the first path under ``el``."""
    d = next(p.get("d") for p in el.iter() if p.tag.endswith("path"))
    nums = [float(v) for v in re.findall(r"-?[0-9.]+", d)]
    return list(zip(nums[::2], nums[1::2]))


def ticks(el: ET.Element, axis: str) -> list[tuple[float, str]]:
    """(position in the SVG, label) per major tick of ``axis`` (x or y) under ``el`` (one plot area's
    group, or the root of a single-plot SVG)."""
    out = []
    for g in by_id(el, f"{axis}tick_").values():
        mark = next(u for u in g.iter() if u.tag.endswith("use"))
        out.append((float(mark.get(axis)), texts(g)[0]))
    return out


def y_scale(el: ET.Element) -> Callable[[float], float]:
    """SVG y -> data value, from the y ticks (their labels are the values)."""
    (p0, v0), (p1, v1) = [(p, float(t.replace(",", ""))) for p, t in ticks(el, "y")][:2]
    return lambda y: v0 + (y - p0) * (v1 - v0) / (p1 - p0)


def axis_labels(el: ET.Element) -> list[str]:
    """The x and y axis labels (each axis group's last text)."""
    return [texts(g)[-1] for g in by_id(el, "matplotlib.axis_").values()]


def text_x(t: ET.Element) -> float:
    """Where a text starts: its x, or the x of its ``translate`` (multi-line text)."""
    return float(t.get("x") or re.match(r"translate\(([-0-9.]+)", t.get("transform")).group(1))


def right_of(el: ET.Element, area: ET.Element) -> bool:
    """Every text under ``el`` starts right of the first path under ``area`` (a plot area's rectangle)."""
    return min(text_x(t) for t in el.iter() if t.tag.endswith("text")) > max(x for x, _ in points(area))
