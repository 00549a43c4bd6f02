"""The ``perf <rollout_id>: {...}`` lines of a Miles or Slime driver log, as ``ray job logs`` returns it.

Both frameworks print a step's figures with ``logger.info(f"perf {rollout_id}: {log_dict}")``, the
dict's own ``repr``, twice per step:

- rollout side, after generation: Miles radixark/miles@49cac7b5 ``miles/ray/rollout/metrics.py:89``
  (keys ``rollout/response_len/{mean,median,max,min}`` from ``metrics.py:99`` with
  ``miles/utils/metric_utils.py:56-63``, ``perf/rollout_time``, ``perf/tokens_per_gpu_per_sec`` =
  generated tokens / rollout time / rollout GPUs, ``metrics.py:142-149``); Slime THUDM/slime@bd217a63
  (v0.2.4) ``slime/ray/rollout.py:1190`` with the same keys (``rollout.py:1200, 1212-1219``);
- training side, after the step: Miles ``miles/utils/train_metric_utils.py:56``, Slime
  ``slime/utils/train_metric_utils.py:44``: ``perf/<timer>_time`` (``perf/actor_train_time``, ...) and
  ``perf/step_time`` = ``perf/train_wait_time`` + ``perf/train_time`` (Miles ``:50-54``, Slime ``:38-42``).

Each line carries the logging prefix (Miles ``miles/utils/logging_utils.py:35``:
``[%(asctime)s.%(msecs)03d <process>] file:line - ``; Slime ``slime/utils/logging_utils.py:21``:
``[%(asctime)s<prefix>] file:line - ``) and, being printed by a Ray actor, Ray's worker prefix
``(<Actor> pid=<pid>, ip=<ip>) `` in colour (ray 2.53.0 ``ray/_private/worker.py:2350-2353``).
``ray job logs`` prints the log as is (``ray/dashboard/modules/job/cli.py:500``). Ray's log
deduplication may hold back lines that look alike across processes and print one with
`` [repeated Nx across cluster]`` (``ray/_private/ray_logging/__init__.py:229-234``): such lines are
counted, since steps may then be missing (run with ``RAY_DEDUP_LOGS=0``).

Two more lines of the training side carry what the step did, besides its speed (radixark/miles@49cac7b5):
``rollout <rollout_id>: {...}`` from ``log_rollout_data`` (``miles/backends/training_utils/log_utils.py:123``,
keys ``rollout/<field>`` of the rollout batch, ``rollout/raw_reward`` among them), merged into the step;
``step <n>: {...}`` from ``log_train_step`` (``log_utils.py:542``, keys ``train/<loss key>`` such as
``train/ppo_kl``, ``miles/backends/training_utils/loss_hub/losses.py:88``), where ``n`` is
``rollout_id x num_steps_per_rollout + step_id``, kept apart in ``ParsedLog.train``. A critic's
``critic-step`` lines are not the actor's and are ignored.

Values may be numpy scalars: with ``--log-passrate`` Miles adds ``passrate/pass@k`` as ``np.mean(...)``
(``miles/utils/metric_utils.py:34-35``), which numpy >= 2 prints as ``np.float64(0.5)``; such a call of a
numpy scalar type around a literal is read as the literal.

Guarantees: the dict is read as ``ast.literal_eval`` reads it (``nan``/``inf`` as floats; a repr of
plain string keys and numbers through ``json``, which reads it identically and faster), never ``eval``; a
truncated or malformed line is counted with its line number and never half-read; the two lines of a
step are merged; a step seen again (a resumed attempt redoing it) is kept as a new occurrence.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

ANSI = re.compile(r"\x1b\[[0-9;]*m")
PERF = re.compile(r"(?<![\w-])(perf|rollout|step) (\d+): (\{.*)$")
STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,](\d{3}))?")
REPEATED = re.compile(r"\[repeated (\d+)x across cluster\]")
ROLLOUT_KEY = "perf/rollout_time"
TRAIN_KEYS = ("perf/step_time", "perf/actor_train_time", "perf/train_time")
_SPECIAL = {"nan": math.nan, "inf": math.inf}
_NUMPY = ("np", "numpy")
_NUMPY_SCALARS = frozenset({"float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint64", "uint32",
                            "uint16", "uint8", "bool_", "longdouble"})
_JSON_SPECIAL = re.compile(r"\b(nan|inf)\b")


@dataclass
class Step:
    rollout_id: int
    metrics: dict[str, float] = field(default_factory=dict)
    at: datetime | None = None
    """When the step's rollout line was logged (UTC as the pods log it)."""
    line: int = 0


@dataclass
class ParsedLog:
    steps: list[Step]
    """Every occurrence of every step, in log order."""
    malformed: list[tuple[int, str]]
    """(line number, reason) of perf lines that could not be read."""
    collapsed: int = 0
    """Lines Ray's deduplication printed once for several (``[repeated Nx ...]``)."""
    train: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    """(accumulated train step, ``train/*`` metrics) of every ``step <n>:`` line, in log order."""

    def first(self) -> dict[int, Step]:
        """The first occurrence of each step id (a redo after a resume is not counted twice)."""
        out: dict[int, Step] = {}
        for s in self.steps:
            out.setdefault(s.rollout_id, s)
        return out


def _repr_as_json(text: str) -> dict | None:
    """The same dict as ``ast.literal_eval`` reads, when the repr is of plain string keys and number
    values (what both frameworks print), read by ``json`` (a tenth of the time), else None. Exact: with
    no ``"`` or backslash, the repr's strings are the odd parts between single quotes, their contents
    are copied unchanged, and only the parts outside strings get ``nan``/``inf`` spelt as JSON."""
    if '"' in text or "\\" in text:
        return None
    parts = text.split("'")
    if len(parts) % 2 == 0:
        return None
    if "nan" in text or "inf" in text:
        for i in range(0, len(parts), 2):
            parts[i] = _JSON_SPECIAL.sub(lambda m: {"nan": "NaN", "inf": "Infinity"}[m.group(0)], parts[i])
    try:
        value = json.loads('"'.join(parts))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _literal(text: str) -> dict | None:
    """The dict a ``repr`` printed, or None. ``nan``/``inf`` are names in a repr, not literals."""
    fast = _repr_as_json(text)
    if fast is not None:
        return fast
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        try:
            tree = ast.parse(text, mode="eval")
        except (SyntaxError, MemoryError, RecursionError, ValueError):
            return None

        class Names(ast.NodeTransformer):
            def visit_Name(self, node: ast.Name) -> ast.AST:
                return ast.Constant(_SPECIAL[node.id]) if node.id in _SPECIAL else node

            def visit_Call(self, node: ast.Call) -> ast.AST:
                f = node.func
                if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in _NUMPY
                        and f.attr in _NUMPY_SCALARS and len(node.args) == 1 and not node.keywords):
                    return self.visit(node.args[0])
                return node

        try:
            value = ast.literal_eval(ast.fix_missing_locations(Names().visit(tree)))
        except (ValueError, SyntaxError, TypeError):
            return None
    return value if isinstance(value, dict) else None


def _dict_text(rest: str) -> str:
    """The dict's text: up to its last closing brace (drops Ray's dedup suffix and colour codes)."""
    end = rest.rfind("}")
    return rest[: end + 1] if end >= 0 else rest


def stamp(line: str) -> datetime | None:
    """The time of a line's logging prefix (``[YYYY-MM-DD HH:MM:SS[.mmm]``), as UTC."""
    m = STAMP.search(line)
    if not m:
        return None
    at = datetime.fromisoformat(m.group(1)).replace(tzinfo=timezone.utc)
    return at.replace(microsecond=int(m.group(2) or 0) * 1000)


def parse_log(text: str) -> ParsedLog:
    steps: list[Step] = []
    open_steps: dict[int, Step] = {}
    malformed: list[tuple[int, str]] = []
    train: list[tuple[int, dict[str, float]]] = []
    collapsed = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if ": {" not in raw:
            continue
        line = ANSI.sub("", raw)
        m = PERF.search(line)
        if not m:
            continue
        if (rep := REPEATED.search(line)) is not None:
            collapsed += int(rep.group(1))
        metrics = _literal(_dict_text(m.group(3)))
        if metrics is None:
            malformed.append((number, f"{m.group(1)} line: not a complete dict (truncated line?)"))
            continue
        bad = [k for k, v in metrics.items() if not isinstance(k, str) or isinstance(v, bool)
               or not isinstance(v, (int, float))]
        metrics = {k: float(v) for k, v in metrics.items() if k not in bad}
        kind, rid = m.group(1), int(m.group(2))
        if kind == "step":
            train.append((rid, metrics))
            continue
        current = open_steps.get(rid)
        if kind == "rollout":
            if current is None:
                current = open_steps[rid] = Step(rid, line=number)
                steps.append(current)
            current.metrics.update(metrics)
            continue
        side_rollout = ROLLOUT_KEY in metrics
        seen_side = current is not None and (
            (side_rollout and ROLLOUT_KEY in current.metrics)
            or (not side_rollout and any(k in current.metrics for k in TRAIN_KEYS)))
        if current is None or seen_side:
            current = Step(rid, line=number)
            open_steps[rid] = current
            steps.append(current)
        current.metrics.update(metrics)
        if side_rollout or current.at is None:
            current.at = stamp(line) or current.at
    return ParsedLog(steps, malformed, collapsed, train)
