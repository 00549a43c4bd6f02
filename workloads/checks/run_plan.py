"""The offline plan of a set of runs against a stack: which start, which wait and why, which are
preempted, and what each claims per queue and pool.

It follows the scheduler the stack installs (``render.operators.scheduler_config``: Volcano v1.15.1
with the gang, priority and ``capacity`` plugins and the enqueue, allocate, preempt and reclaim
actions), with whole runs as the unit: a run's pods form one gang (all placed or none), and a run
that loses a pod stops. docs/design/scheduling.md ("Scheduling rules") states the rules; in short, per scheduling
session, after the runs already running:

1. quota: the team namespace's ResourceQuota admits a run's pods only while the team's pods request
   no more GPUs of each pool than its cap there (runs in file order, the order they are submitted);
2. enqueue: a run leaves Pending only when its queue's allocated + admitted GPUs + its own fit the
   queue's limit on every pool (``PoolShare.limit``); a Pending run never preempts nor reclaims;
3. allocate: queues by priority, then least allocated/deserved; within a queue runs by priority,
   then file order; a run starts when every pool it needs has the nodes free;
4. preempt: an admitted run takes the nodes of Running lower-priority runs of its own team;
5. reclaim: an admitted run whose team stays within its deserved share on each of its pools takes, pod
   by pod, nodes of Running runs of reclaimable teams while such a team is above its deserved share on
   the pod's pool and keeps its guarantee on every pool without the pod (a team under its guarantee on
   one pool keeps its pods on every pool; a run waiting on that is told which team and pool, ``_Kept``).

Queues count one dimension per GPU pool (``checks.queues``; docs/design/scheduling.md, "Per-pool
guarantees"), so shares, limits and reclaim are judged per pool.

A victim is asked for a checkpoint through the save sentinel and has ``checkpointMinutes`` (the pods'
termination grace period) to write it before its pods stop; a run that loses a pod stops whole, and
its nodes are free from the next session on. The claimant is only pipelined onto them: it starts in
the next session's allocate, where the freed nodes go queue by queue again, so a waiting run of the
victims' team, its queue now the lower share, may take them first. A reclaim needing free nodes in one
pool and victims in another *may wait* (``MAY_WAIT``). Sessions repeat until nothing changes: a run
started in one session is Running, and so a possible victim, in the next. Nodes are not all a
run needs: its checkpoint budget (saves kept, its staged model and data; ``checkpoint_budget``) must
fit in what the shared file system has left after the runs placed before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from workloads.schema.run import RunFile
from workloads.derive.checkpoint_budget import GB, GIB, USABLE_FRACTION, budget
from workloads.derive.deepep import expert_precision
from workloads.checks.queues import gpu_pools, queue_shares
from workloads.schema.teams import QUOTA_NAME
from workloads.checks.runs import check_run, run_config, run_pools

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig

MAY_WAIT = "may wait"
"""In the reason of a run that starts by reclaiming nodes of one pool and needs free nodes of another:
Volcano's reclaim places a pod only on a node where it evicts one (v1.15.1 actions/reclaim/reclaim.go:
186-206), so its pods on free nodes are placed only by preempt's within-job loop, which takes the run's
pods in task order (creation second, then UID) and stops at the first that finds no free node
(actions/preempt/preempt.go:236-286); if one needing a victim comes first, the run waits and its victims
keep running. KubeRay creates the head, the trainers, then the rollout engines (the pools' order), often
within one second, so the plan cannot say which."""
AFTER_RETRY = "after KubeRay's retry"
"""In the reason of a run the team's ResourceQuota refused in an earlier session of the plan and that starts
once a run of its team stops: KubeRay creates a refused run's pods only when it reconciles the RayCluster again.
A refused create ends the reconcile with an error (ray-project/kuberay v1.6.2 raycluster_controller.go:349-360),
which controller-runtime requeues with the item's exponential backoff, not the returned ``RequeueAfter``
(controller-runtime v0.22.4 pkg/internal/controller/controller.go:463-473), 5 ms doubling with every failed
reconcile up to 1000 s (client-go util/workqueue/default_rate_limiters.go ``DefaultTypedControllerRateLimiter``).
Every refusal counts, the reconciles its own pods' events start included, so a run that waited on the quota for
minutes starts up to about 17 minutes after the quota frees (Volcano gives the nodes to other runs that fit
meanwhile). Any change of the RayCluster's annotations makes KubeRay reconcile it at once (v1.6.2
raycluster_controller.go:1542-1546, ``AnnotationChangedPredicate``). The plan says so only when the refusal
is in the same plan: a run refused before the runs it is planned with reads "starts on free nodes"."""


@dataclass
class Decision:
    run: str
    team: str
    priority: str
    action: str
    """``running`` (was running, keeps its nodes), ``starts``, ``waits`` or ``preempted``."""
    why: str
    gpus: dict[str, int] = field(default_factory=dict)
    """Pool -> GPUs the run claims."""

    @property
    def placed(self) -> bool:
        return self.action in ("running", "starts")


@dataclass
class _Cluster:
    free: dict[str, int]
    disk_free: int
    """Bytes of the shared file system not yet budgeted to a run (``checkpoint_budget``)."""
    allocated: dict[str, dict[str, int]]
    """Team -> pool -> GPUs its placed runs hold."""
    placed: list[RunFile] = field(default_factory=list)
    held: dict[str, int] = field(default_factory=dict)
    """Pool -> nodes of stopping victims no run may take before the next session."""

    def take(self, run: RunFile, gpus: dict[str, int], disk: int) -> None:
        self.disk_free -= disk
        for pool, n in run.nodes.items():
            self.free[pool] -= n
            self.allocated[run.team][pool] = self.allocated[run.team].get(pool, 0) + gpus[pool]
        self.placed.append(run)

    def release(self, run: RunFile, gpus: dict[str, int], disk: int) -> None:
        self.disk_free += disk
        for pool, n in run.nodes.items():
            self.free[pool] += n
            self.allocated[run.team][pool] -= gpus[pool]
        self.placed.remove(run)


@dataclass(frozen=True)
class _Kept:
    """A pod the reclaim could not take for its team's guarantee: the team holds more than its deserved on the
    pod's pool (or has none there) but, without the pod, less than its guarantee on ``under``."""

    team: str
    pool: str
    used: dict[str, int]
    """Pool -> GPUs the team holds when the pod is tried (less the pods already taken from it)."""
    gpus: int
    under: list[str]


class Planner:
    """Queue state of one stack; ``plan`` decides a list of runs."""

    def __init__(self, cfg: "ProgramConfig", mixed_reclaims: bool = True):
        self.cfg = cfg
        self.mixed_reclaims = mixed_reclaims
        """Whether a reclaim that ``MAY_WAIT`` places its run; False plans the other outcome (its run waits, its
        victims keep running)."""
        self.pools = {p.name: p for p in run_pools(cfg)}
        self.teams = {t.name: t for t in cfg.workloads.teams}
        self.queues = queue_shares(cfg.workloads.teams, gpu_pools(cfg))
        self.values = cfg.workloads.priority_classes
        self.grace = cfg.workloads.capacity_block_end.checkpoint_minutes
        self.usable = int(cfg.workloads.storage.capacity_gib * GIB * USABLE_FRACTION)
        """Bytes of the file system the runs may use (a run alone always fits: ``run_config`` checks it)."""
        self.disk: dict[str, int] = {}
        """Run -> bytes it budgets on the file system (saves kept, its staged model and data)."""
        self._file_order: dict[str, int] = {}
        self._inqueue: set[str] = set()
        """Runs enqueue admitted (PodGroup Inqueue) that hold no nodes yet."""
        self._claimed: dict[str, str] = {}
        """Run -> how it starts, for a run whose victims stop in this session (it starts in the next)."""
        self._refused: set[str] = set()
        """Runs the quota refused in an earlier session of this plan (``AFTER_RETRY``)."""
        self._kept: dict[str, list[_Kept]] = {}
        """Run -> the pods its reclaim of this session found above their team's deserved but kept for the team's
        guarantee, one per team (``_why_waiting`` names them)."""

    def _budget(self, run: RunFile) -> int:
        """Checks the run on its own nodes (``run_config``) and returns its file system budget."""
        seen = run_config(self.cfg, run)
        b = budget(seen, expert_precision(seen))
        return 0 if b is None else b.need_bytes

    def gpus(self, run: RunFile) -> dict[str, int]:
        return {pool: n * self.pools[pool].instance.gpus for pool, n in run.nodes.items()}

    def _job_order(self, run: RunFile) -> tuple[int, int]:
        """Higher PriorityClass first (plugins/priority/priority.go:71-89), then submitted first."""
        return -self.values[run.priority], self._file_order[run.key]

    def _queue_order(self, c: _Cluster, team: str) -> tuple:
        """Higher queue priority, then lower allocated/deserved, then one with a deserved
        (capacity.go:1183-1193, 1544-1561); then the stack's team order (creation)."""
        q = self.queues[team]
        return -q.priority, q.share(c.allocated[team]), not q.deserves, list(self.teams).index(team)

    def _in_queue_order(self, c: _Cluster, runs: list[RunFile]) -> Iterator[RunFile]:
        """``runs`` as a session serves them: the first queue's first run, then queues re-ordered by
        what has been allocated since (actions/allocate/allocate.go:129-130, 283-300)."""
        left = sorted(runs, key=self._job_order)
        while left:
            team = min({r.team for r in left}, key=lambda t: self._queue_order(c, t))
            run = next(r for r in left if r.team == team)
            left.remove(run)
            yield run

    def _blockers(self, c: _Cluster, run: RunFile) -> list[str]:
        short = [f"pool {p}: {n} nodes needed, {c.free[p]} free" for p, n in run.nodes.items() if n > c.free[p]]
        disk = self.disk[run.key]
        full = [f"file system: {disk / GB:,.0f} GB needed, {c.disk_free / GB:,.0f} GB not yet budgeted"] \
            if disk > c.disk_free else []
        return short + full

    def _created(self, run: RunFile, room: dict[str, int]) -> dict[str, int]:
        """GPUs of the pods of a run the quota refuses that exist nonetheless: KubeRay creates the head, then
        each worker group's pods one by one in the RayCluster's order (trainers, then rollout engines: the
        pools' order) and ends a reconcile at the first pod refused (ray-project/kuberay v1.7.0
        raycluster_controller.go:1069, 1203-1211), retrying it later; the pods made before it hold quota."""
        held = {pool: 0 for pool in self.pools}
        for pool, spec in self.pools.items():
            for _ in range(run.nodes.get(pool, 0)):
                if held[pool] + spec.instance.gpus > room.get(pool, 0):
                    return held
                held[pool] += spec.instance.gpus
        return held

    def _with_pods(self, pending: list[RunFile], running: list[RunFile], out: dict[str, Decision]) -> list[RunFile]:
        """Runs whose pods the team's ResourceQuota admits (``requests.rl.platform/gpu-<pool>`` = its cap on
        each pool, ``render.teams.pool_gpu_quota``), in the order they were submitted; KubeRay retries the
        others' pods, and those of their pods it made first hold quota (``_created``)."""
        pods = {t: {p: sum(self.gpus(r).get(p, 0) for r in running if r.team == t) for p in self.pools}
                for t in self.teams}
        out_runs = []
        for run in pending:
            shares, held, asks = self.queues[run.team].pools, pods[run.team], self.gpus(run)
            over = [p for p, n in asks.items() if held[p] + n > shares[p].capability]
            if over:
                p = over[0]
                self._decide(out, run, "waits", f"ResourceQuota {QUOTA_NAME} refuses its pods: team {run.team}'s pods "
                             f"would request {held[p] + asks[p]} GPUs of pool {p}, more than its {shares[p].capability}")
                self._refused.add(run.key)
                for pool, n in self._created(run, {q: s.capability - held[q] for q, s in shares.items()}).items():
                    held[pool] += n
                continue
            for pool, n in asks.items():
                held[pool] += n
            out_runs.append(run)
        return out_runs

    def _enqueue(self, c: _Cluster, runs: list[RunFile], out: dict[str, Decision]) -> list[RunFile]:
        """Runs out of Pending: those admitted in an earlier session stay Inqueue; another is admitted
        when its queue's allocated + admitted + its own GPUs fit its limit on every pool (actions/enqueue/
        enqueue.go:81-103, capacity.go:1680-1692)."""
        admitted: dict[str, dict[str, int]] = {t: {} for t in self.teams}

        def admit(run: RunFile) -> None:
            for pool, n in self.gpus(run).items():
                admitted[run.team][pool] = admitted[run.team].get(pool, 0) + n
        for run in runs:
            if run.key in self._inqueue:
                admit(run)
        for run in sorted(runs, key=self._job_order):
            if run.key in self._inqueue:
                continue
            q, g = self.queues[run.team], self.gpus(run)
            held = {p: c.allocated[run.team].get(p, 0) + admitted[run.team].get(p, 0) for p in g}
            over = q.over_limit({p: held[p] + n for p, n in g.items()})
            if over:
                p, share = over[0], q.pools[over[0]]
                self._decide(out, run, "waits", f"Pending: queue team-{run.team} holds {held[p]} GPUs of pool {p}, "
                             f"{held[p] + g[p]} with this run, above its limit {share.limit} there (capability "
                             f"{share.capability}, at most the pool's GPUs not guaranteed to other queues); a "
                             f"Pending run neither preempts nor reclaims")
                continue
            admit(run)
            self._inqueue.add(run.key)
        return [r for r in runs if r.key in self._inqueue]

    def _evict(self, c: _Cluster, run: RunFile, candidates: list[RunFile],
               may_take: Callable[[RunFile, str, int], bool]) -> list[RunFile] | None:
        """Victims whose pods free the nodes ``run`` lacks, pod by pod (one pod per node), the
        lowest-priority, latest run first, each pod only if ``may_take(victim, its pool, its GPUs)``; None when
        they cannot free enough. A victim stops whole: the nodes the run does not take are held until
        the next session (its pods are still stopping)."""
        need = {p: n - c.free[p] for p, n in run.nodes.items() if n > c.free[p]}
        chosen: list[RunFile] = []
        for victim in sorted(reversed(candidates), key=lambda v: self.values[v.priority]):
            for pool, pods in victim.nodes.items():
                while need.get(pool, 0) > 0 and pods > 0 and may_take(victim, pool, self.pools[pool].instance.gpus):
                    need[pool], pods = need[pool] - 1, pods - 1
                    if victim not in chosen:
                        chosen.append(victim)
        freed_disk = sum(self.disk[v.key] for v in chosen)
        if any(n > 0 for n in need.values()) or self.disk[run.key] > c.disk_free + freed_disk:
            return None
        for victim in chosen:
            c.release(victim, self.gpus(victim), self.disk[victim.key])
        return chosen

    def _preempt(self, c: _Cluster, run: RunFile, running: list[RunFile]) -> list[RunFile] | None:
        """Running runs of the run's own team at a lower priority (actions/preempt/preempt.go:198-216,
        plugins/priority/priority.go:111-149); enqueue already held the queue to its limit."""
        lower = [v for v in running if v.team == run.team and v in c.placed
                 and self.values[v.priority] < self.values[run.priority]]
        return self._evict(c, run, lower, lambda v, pool, gpus: True)

    def _reclaim(self, c: _Cluster, run: RunFile, running: list[RunFile]) -> list[RunFile] | None:
        """Running runs of other, reclaimable teams (actions/reclaim/reclaim.go:188-201) while the
        run's team stays within its deserved on each of its pools (capacity.go:648-715,
        ``QueueShare.above_deserved``); a pod goes only while its team is above its deserved on the pod's
        pool (:536-547) and keeps its guarantee on every pool without it (:516, :1840-1851,
        ``QueueShare.may_lose``); the pods kept only for the guarantee are recorded (``_kept``) for the waiting
        run's reason."""
        if self.queues[run.team].above_deserved(c.allocated[run.team], self.gpus(run)):
            return None
        left = {t: dict(a) for t, a in c.allocated.items()}
        kept = self._kept.setdefault(run.key, [])

        def may_take(v: RunFile, pool: str, gpus: int) -> bool:
            q = self.queues[v.team]
            if q.may_lose(left[v.team], pool, gpus):
                left[v.team][pool] = left[v.team].get(pool, 0) - gpus
                return True
            if q.above_deserved_on(left[v.team], pool) and all(k.team != v.team for k in kept):
                under = q.under_guarantee(left[v.team], pool, gpus)
                kept.append(_Kept(v.team, pool, dict(left[v.team]), gpus, under))
            return False
        others = [v for v in running if v.team != run.team and v in c.placed and self.queues[v.team].reclaimable]
        return self._evict(c, run, others, may_take)

    def _kept_line(self, k: _Kept) -> str:
        """Why the reclaim keeps ``k``'s pods: the team's guarantee on the pools it would be under without one."""
        share = self.queues[k.team].pools.get(k.pool)
        held = k.used.get(k.pool, 0)
        above = (f"above its deserved {share.deserved} there" if share is not None and share.deserved
                 else "where it has no deserved")
        now = [p for p in k.under if k.used.get(p, 0) < self.queues[k.team].pools[p].guarantee]
        rule = ("Volcano reclaims no pod of a queue that would be under its guarantee on any pool without it "
                "(capacity.go:1840-1851)")
        if now:
            under = ", ".join(f"pool {p} ({k.used.get(p, 0)} of its {self.queues[k.team].pools[p].guarantee} "
                              f"guaranteed GPUs held)" for p in now)
            return (f"team {k.team} holds {held} GPUs of pool {k.pool}, {above}, but is under its guarantee on "
                    f"{under}: {rule}, so team {k.team} keeps its pods on every pool")
        guarantee = self.queues[k.team].pools[k.pool].guarantee
        return (f"team {k.team} holds {held} GPUs of pool {k.pool}, {above}, but would hold {held - k.gpus} there "
                f"without one more pod, under its guarantee {guarantee}: {rule}, so team {k.team} keeps its pods "
                f"on pool {k.pool}")

    def _why_waiting(self, c: _Cluster, run: RunFile, blockers: list[str]) -> str:
        q, used, asks = self.queues[run.team], c.allocated[run.team], self.gpus(run)
        above = q.above_deserved(used, asks)
        kept = self._kept.get(run.key, [])
        reclaim = (f"reclaim: team {run.team} would hold {used.get(above[0], 0) + asks[above[0]]} GPUs of pool "
                   f"{above[0]}, above its deserved {q.pools[above[0]].deserved} there" if above else
                   "reclaim: " + "; ".join(self._kept_line(k) for k in kept) if kept else
                   "reclaim: no reclaimable team above its deserved frees enough")
        return (f"whole gang or nothing: {'; '.join(blockers)}; preempt: no lower-priority run of team {run.team} "
                f"frees enough; {reclaim}")

    def _holds(self, c: _Cluster, run: RunFile, what: str) -> str:
        q, used = self.queues[run.team], c.allocated[run.team]
        held = ", ".join(f"{p} {used.get(p, 0)} (deserved {s.deserved}, limit {s.limit})" for p, s in q.pools.items())
        return f"{what}; queue team-{run.team} holds GPUs of pool {held}"

    def _decide(self, out: dict[str, Decision], run: RunFile, action: str, why: str) -> None:
        out[run.key] = Decision(run.name, run.team, run.priority, action, why, self.gpus(run))

    def _start(self, c: _Cluster, run: RunFile) -> None:
        c.take(run, self.gpus(run), self.disk[run.key])
        self._inqueue.discard(run.key)

    def _task_order(self, run: RunFile, free: dict[str, int]) -> str:
        """``MAY_WAIT`` and why, for a reclaiming run with pods on free nodes of one pool and pods needing
        victims on another; else ''."""
        on_free = [p for p, n in run.nodes.items() if n and free[p]]
        on_victims = [p for p, n in run.nodes.items() if n > free[p]]
        if not any(a != b for a in on_free for b in on_victims):
            return ""
        return (f"; {MAY_WAIT}: Volcano's reclaim places no pod on a free node, so its pods for free nodes of "
                f"pool {', '.join(on_free)} must come before those needing a victim on pool "
                f"{', '.join(on_victims)} in Volcano's task order, or it waits and its victims keep running")

    def _session(self, c: _Cluster, pending: list[RunFile], running: list[RunFile],
                 out: dict[str, Decision]) -> bool:
        """One scheduling session; True when a run started or stopped."""
        self._kept = {}
        admitted = self._enqueue(c, self._with_pods(pending, running, out), out)
        changed, left, started = False, [], []
        for run in self._in_queue_order(c, admitted):
            if self._blockers(c, run):
                left.append(run)
                continue
            self._start(c, run)
            how = self._claimed.pop(run.key, "starts on free nodes")
            if run.key in self._refused:
                how += (f" {AFTER_RETRY} of the pods the quota refused (its backoff, up to 1000 s after the quota "
                        f"frees; an annotation on its RayCluster retries at once)")
            self._decide(out, run, "starts", self._holds(c, run, how))
            started.append(run.name)
            changed = True
        lost = {r.key: self._claimed.pop(r.key) for r in left if r.key in self._claimed}
        for how, claim in (("preempt", self._preempt), ("reclaim", self._reclaim)):
            waiting = []
            for run in self._in_queue_order(c, left):
                free = dict(c.free)
                hedge = self._task_order(run, free) if how == "reclaim" else ""
                victims = None if hedge and not self.mixed_reclaims else claim(c, run, running)
                if victims is None:
                    waiting.append(run)
                    continue
                kept = f"; {MAY_WAIT}: kept if {run.name}'s reclaim waits (Volcano's task order)" if hedge else ""
                for v in victims:
                    before = "" if out[v.key].action == "running" else "starts, then "
                    self._decide(out, v, "preempted", f"{before}{how} by {run.name} ({run.priority}): asked to "
                                 f"checkpoint, stops within {self.grace} min{kept}")
                for pool, n in free.items():  # the run is pipelined on its nodes; the rest are free next session
                    keep = n - min(n, run.nodes.get(pool, 0))
                    c.held[pool] = c.held.get(pool, 0) + c.free[pool] - keep
                    c.free[pool] = keep
                self._claimed[run.key] = (f"starts after {', '.join(v.name for v in victims)} checkpoint and stop"
                                          + hedge)
                self._decide(out, run, "waits", f"{how}s: its victims stop this session")
                changed = True
            left = waiting
        for run in left:
            why = self._why_waiting(c, run, self._blockers(c, run))
            if run.key in lost:
                why = (f"its victims stopped, but allocate gave the freed nodes to {', '.join(started)} first (the "
                       f"lower queue share, then priority, first); {why}")
            self._decide(out, run, "waits", why)
        return changed

    def plan(self, runs: Sequence[RunFile], running: frozenset[str] = frozenset(),
             admitted: frozenset[str] = frozenset()) -> list[Decision]:
        """Decisions for ``runs`` (NeverFits first, for a run that can never be placed); ``running`` hold their
        nodes, ``admitted`` are waiting runs enqueue already let out of Pending (PodGroup Inqueue), which stay
        so whatever is submitted after them."""
        for i, run in enumerate(runs):
            check_run(self.cfg, run)
            self.disk[run.key] = self._budget(run)
            self._file_order[run.key] = i
        self._inqueue = {r.key for r in runs if r.name in admitted or r.key in admitted}
        self._claimed.clear()
        self._refused.clear()
        c = _Cluster(free={p: pool.nodes.desired for p, pool in self.pools.items()}, disk_free=self.usable,
                     allocated={t: {} for t in self.teams})
        out: dict[str, Decision] = {}
        for run in (r for r in runs if r.name in running or r.key in running):
            c.take(run, self.gpus(run), self.disk[run.key])
            self._decide(out, run, "running", "holds its nodes")
        refused = self._beyond_max_runs(runs, out)
        for _ in range(2 * len(runs) + 1):  # each session starts or stops a run, or nothing changes
            for pool, n in c.held.items():
                c.free[pool] += n
            c.held = {}
            on_nodes = list(c.placed)
            pending = [r for r in runs if r.key not in refused and (r.key not in out or out[r.key].action == "waits")]
            if not self._session(c, pending, on_nodes, out):
                break
        return [out[r.key] for r in runs]

    def _beyond_max_runs(self, runs: Sequence[RunFile], out: dict[str, Decision]) -> set[str]:
        """Runs past their team's ``maxRuns`` (the running first, then in file order): the ResourceQuota's
        ``count/rayjobs.ray.io`` refuses their RayJob at submission, so they wait outside the scheduler."""
        held = {t: sum(out.get(r.key) is not None and r.team == t for r in runs) for t in self.teams}
        refused = set()
        for run in (r for r in runs if r.key not in out):
            held[run.team] += 1
            most = self.teams[run.team].max_runs
            if held[run.team] > most:
                refused.add(run.key)
                self._decide(out, run, "waits", f"ResourceQuota {QUOTA_NAME} count/rayjobs.ray.io: team {run.team} "
                                                 f"may hold {most} RayJobs at once (teams[{run.team}].maxRuns); "
                                                 f"submit is refused until one of its runs is deleted")
        return refused


def plan_runs(cfg: "ProgramConfig", runs: Sequence[RunFile], running: frozenset[str] = frozenset()) -> list[Decision]:
    return Planner(cfg).plan(runs, running)
