"""The create order `pulumi up` follows for a recorded graph, and its modelled critical path.

How the Python SDK orders creates (pulumi 3.272, ``pulumi/runtime/resource.py`` and
``pulumi/runtime/rpc.py``), which this module models:

- A resource's RegisterResource request is sent only once ``prepare_resource`` has awaited
  (1) the URNs of its ``depends_on`` (a local component is expanded to its custom and remote
  descendants by ``rpc._add_dependency``), (2) every input Output (the resources behind them
  become ``dependencies``), (3) its parent's URN, and (4) its provider's URN and id
  (``_create_provider_ref``). A custom resource's URN resolves when the engine answers its
  RegisterResource, i.e. after the create finished.
- A local component is registered the same way, so its URN resolves only after its own
  ``depends_on`` are created. Its children await that URN (3), so they DO wait for the
  component's ``depends_on`` although their recorded ``dependencies`` do not list it
  (pulumi/pulumi#7791 describes the same parent-URN ordering). A child of a custom resource
  waits for that resource's create.
- The engine runs every registered step at once (default parallelism is unbounded), so a
  create starts when its last wait is satisfied.

So a resource starts at the latest finish among: its recorded ``dependencies``, its provider,
and its parent (for a component parent: the time the component itself could register). Its
finish is start + the typical create time of its type (``create_times``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .create_times import create_seconds
from .mocks import Graph, Registered

DEPENDENCY = "dependency"
PARENT = "parent"
PROVIDER = "provider"


@dataclass(frozen=True)
class Step:
    urn: str
    type: str
    name: str
    start: float
    seconds: float
    waits_on: str
    """URN that set this resource's start ("" when it can start at once)."""
    reason: str
    """Why it waits: ``dependency`` (inputs, depends_on), ``parent`` or ``provider``."""

    @property
    def finish(self) -> float:
        return self.start + self.seconds


@dataclass(frozen=True)
class PathStep:
    step: Step
    via: str
    """How it waits on the previous step: ``dependency``, ``provider``, ``parent`` (a custom
    parent), ``parent <Component> <name>'s depends_on``, or ``no wait`` for the first."""


@dataclass(frozen=True)
class Schedule:
    steps: dict[str, Step]
    path: list[PathStep]

    @property
    def critical_seconds(self) -> float:
        return max((s.finish for s in self.steps.values()), default=0.0)

    @property
    def serial_seconds(self) -> float:
        """Every create one after another, as with ``pulumi up --parallel 1``."""
        return sum(s.seconds for s in self.steps.values())

    @property
    def parallelism(self) -> float:
        return self.serial_seconds / self.critical_seconds if self.critical_seconds else 1.0


def waits(resource: Registered, by_urn: dict[str, Registered],
          component_depends_on: bool = True) -> list[tuple[str, str]]:
    """What ``resource`` waits on before its create starts, as (urn, reason). Without
    ``component_depends_on``, a local component's own dependencies are left out (what-if)."""
    held = resource.custom or component_depends_on
    out = [(d, DEPENDENCY) for d in resource.dependencies if d in by_urn] if held else []
    if resource.provider in by_urn:
        out.append((resource.provider, PROVIDER))
    if resource.parent in by_urn:
        out.append((resource.parent, PARENT))
    return out


def schedule(graph: Graph, seconds: Callable[[Registered], float] | None = None,
             component_depends_on: bool = True) -> Schedule:
    """Earliest start of every registered resource under unbounded parallelism; with
    ``component_depends_on=False``, as if no component held its children back."""
    seconds = seconds or (lambda r: create_seconds(r.type, r.inputs, r.custom))
    by_urn = graph.by_urn()
    steps: dict[str, Step] = {}
    for root in graph.resources:
        stack = [root.urn]
        while stack:  # iterative depth-first: deep component trees cannot overflow
            urn = stack[-1]
            if urn in steps:
                stack.pop()
                continue
            resource = by_urn[urn]
            ready = waits(resource, by_urn, component_depends_on)
            pending = [w for w, _ in ready if w not in steps]
            if pending:
                if any(p in stack for p in pending):
                    raise ValueError(f"dependency cycle through {resource.type} {resource.name}")
                stack.extend(pending)
                continue
            stack.pop()
            start, waits_on, reason = 0.0, "", ""
            if ready:  # the latest finish sets the start; on a tie, own needs before the parent's
                waits_on, reason = max(ready, key=lambda w: (steps[w[0]].finish, w[1] != PARENT, w[0]))
                start = steps[waits_on].finish
            steps[urn] = Step(urn, resource.type, resource.name, start,
                              float(seconds(resource)), waits_on, reason)
    return Schedule(steps, _critical_path(steps, by_urn))


def _critical_path(steps: dict[str, Step], by_urn: dict[str, Registered]) -> list[PathStep]:
    """The chain of creates ending last, components folded into the edge that crosses them."""
    if not steps:
        return []
    last = max(steps.values(), key=lambda s: (s.finish, by_urn[s.urn].custom, s.urn))
    chain: list[Step] = []
    step: Step | None = last
    while step is not None:
        chain.append(step)
        step = steps.get(step.waits_on)
    chain.reverse()
    path: list[PathStep] = []
    via: list[str] = []
    for s in chain:
        if not by_urn[s.urn].custom:  # a component: remember it as part of the next edge
            via.append(f"{s.type.rsplit(':', 1)[-1]} {s.name}")
            continue
        how = s.reason if s.start > 0 else "no wait"
        if via and s.reason == PARENT and s.start > 0:
            how = f"parent {via[-1]}'s depends_on"
        path.append(PathStep(s, how))
        via = []
    return path


def inherited_waits(graph: Graph, sched: Schedule) -> list[tuple[Step, float]]:
    """Creates held back only by a parent component's ``depends_on``, with the delay it adds.

    A resource whose own inputs would let it start earlier than its component's dependencies
    allow is serialised by the component, not by what it needs.
    """
    by_urn = graph.by_urn()
    out = []
    for urn, step in sched.steps.items():
        resource = by_urn[urn]
        if not resource.custom or step.reason != PARENT or by_urn[resource.parent].custom:
            continue
        own = max((sched.steps[w].finish for w, why in waits(resource, by_urn) if why != PARENT), default=0.0)
        if step.start > own:
            out.append((step, step.start - own))
    return out
