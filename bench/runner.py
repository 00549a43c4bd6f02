"""``python -m bench run``: submit the attempts one after another on the same nodes, wait for each,
inject a fault arm's faults, and collect each attempt's artifacts into ``OUT/<arm>/r<n>/``.

Everything a run is made of comes from the run command's own code (``workloads.runs``): the stack as
the run sees it and its RayJob (``submit.run_objects``), the Kubernetes calls (``client.RunClient``:
submit, list, next attempt), the image repository (``stackconfig.versions.with_repository``).

Guarantees: every attempt after the first is pinned to the first one's nodes (``pinning``) while those
nodes exist (an ``--only`` re-run to those of the first attempt already collected that the report compares,
``first_pins``): before each submission (a resubmission after a fault included) a pool whose pinned node
is gone is left unpinned and the next finished attempt's nodes become the set, and the attempts of an
arm whose faults terminate a node are never pinned (its replacement node has a new name); ``report``
refuses a comparison across node sets unless asked. ``--dry-run`` prints every attempt's RayJob in
run order, as one multi-document YAML stream (``---`` before each), and contacts no cluster. An
attempt is submitted only when the previous one has finished (the nodes are free again); faults go
through the stack's fault engine (``bench.faults``: AWS FIS, the bench user's AWS identity), never
through Kubernetes calls a team member may not make, and every fault the experiment plans is first
started as an FIS target preview (``Injector.preflight``) before anything is submitted; a fault that
makes the job fail before the job recovered from it (``_recovered``) is followed by the next attempt of
the same run, which resumes from its last complete checkpoint (as ``runs submit --resume``); a finished
attempt's saves are removed at its end (``bench_env``), so attempts do not add up on the file system.
Every wait has a deadline derived from the experiment (``bench.deadlines``); an attempt past one, whose
fault could not be aimed at it alone (``FaultError``), or that failed again after its resume from a fault
(``UnexplainedFailure``: one resume a fault) or after it had recovered from its last fault (the same), is
left as found and recorded ``INCOMPLETE`` with the reason, and the experiment goes
on with the next attempt (unless the attempt's saves, which stay for a rerun, leave the next one too little of
the file system: ``bench.storage``; the experiment then stops there); the command then exits 1 naming
each incomplete attempt and how to run it again (``--only <arm>/r<n>``). Any other failure leaves
the cluster as it was found (``run_attempt``), says what it left, and stops the experiment.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import yaml

from stackconfig.files import STACKS_DIR
from stackconfig.versions import STACK_REPOSITORY, with_repository
from workloads.cli.runs_client import FINISHED, RunClient, attempt_of
from workloads.pod.miles_launcher import CLEAR_SAVES_ENV
from workloads.checks.runs import run_pools
from workloads.deploy.submit import run_objects, sendable
from workloads.schema.stack import ProgramConfig
from workloads.checks import gate
from workloads.derive.checkpoint_budget import GB

from .artifacts import EXPERIMENT_FILE, INCOMPLETE
from .collect import Seen, collect, incomplete, log_source
from .deadlines import CLOCK, Overdue, Watch, deadlines
from .experiment import Attempt, Experiment, load_experiment, schedule
from .faults import FaultError, Injector
from .logparse import parse_log
from .pinning import existing, node_set, pinned
from .reaction import when
from .recovery import STEADY_STEPS, checkpoint_lines
from .serving import ServingRun
from .storage import Room, room

POLL_S = 30.0


class UnexplainedFailure(RuntimeError):
    """The attempt failed again after it was resumed from its last fault (one resume a fault), or after it had
    recovered from it: a failure no fault of the arm explains, recorded INCOMPLETE rather than put on that
    fault's account."""


def _recovered(fault: dict, log: str) -> str | None:
    """How the hit job's driver log shows it had recovered from ``fault`` (None: it had not yet): ``STEADY_STEPS``
    steps logged after the fault's logged step, or Miles' ``Recovered <n> dead rollout engines`` line at or after
    the runner's ``injectedAt`` (set before FIS starts). A job that fails after that is not resumed on the
    fault's account."""
    after = {s.rollout_id for s in parse_log(log).steps if s.rollout_id > fault["loggedStep"]}
    if len(after) >= STEADY_STEPS:
        return f"{len(after)} steps logged after step {fault['loggedStep']}"
    injected = when(fault["injectedAt"])
    lines = [n for at, n in checkpoint_lines(log)["recovered"] if at >= injected]
    return f"Miles recovered {sum(lines)} rollout engines" if lines else None


def _finished(job: dict | None) -> bool:
    return job is not None and (job.get("status") or {}).get("jobDeploymentStatus") in FINISHED


def bench_env(rayjob: dict) -> dict:
    """The RayJob with, in its runtime environment (which Ray applies to the driver):

    - ``RAY_DEDUP_LOGS=0``, so the driver prints every perf line: the driver reads it at import (ray 2.53.0
      ``ray/_private/ray_constants.py:294``) and otherwise holds back lines that look alike across processes
      (``ray/_private/ray_logging/__init__.py:271-315``);
    - ``CLEAR_SAVES_ENV=1``: the launcher removes the attempt's saves once it has finished, so the next attempt
      has the file system an attempt needs (``bench.storage``)."""
    spec = rayjob["spec"]
    env = yaml.safe_load(spec.get("runtimeEnvYAML") or "") or {}
    env.setdefault("env_vars", {}).update({"RAY_DEDUP_LOGS": "0", CLEAR_SAVES_ENV: "1"})
    return {**rayjob, "spec": {**spec, "runtimeEnvYAML": yaml.safe_dump(env, sort_keys=False)}}


def _objects(api: RunClient, cfg: ProgramConfig, run):
    """The run's objects with the cluster's network tiers, as ``runs submit`` makes them."""
    train, rollout = run_pools(cfg)
    sizes, trainers = api.run_tier_sizes(run, train.name, rollout.name)
    return run_objects(cfg, run, sizes or None, trainers or None)


def _removes_nodes(exp: Experiment, arm: str) -> bool:
    return any(f.spec.removes_node for f in exp.arm(arm).faults)


class AttemptRun:
    """One attempt: submit, watch, inject, resume, collect (``run``)."""

    def __init__(self, api: RunClient, cfg: ProgramConfig, exp: Experiment, attempt: Attempt, folder: Path,
                 repository: str, out: Callable[[str], None], injector: Injector | None = None,
                 logs: Callable | None = None, pins: dict[str, list[str]] | None = None) -> None:
        self.api, self.cfg, self.exp, self.attempt, self.folder = api, cfg, exp, attempt, folder
        self.repository, self.out, self.injector, self.pins = repository, out, injector, pins
        self.faults = exp.arm(attempt.arm).faults
        if self.faults and injector is None:
            raise ValueError(f"{attempt.folder}: a fault arm needs the fault engine (AWS credentials for FIS)")
        self.seen = Seen(logs or log_source(cfg))
        self.pending = {f.at_step: f.kind for f in self.faults}
        self.records: list[dict] = []
        self.submitted: list[str] = []
        """The RayJobs this attempt submitted (an earlier run of the same attempt may have left others)."""
        self.watch = Watch(deadlines(exp, attempt.arm, cfg), attempt.folder)
        bench = exp.arm(attempt.arm).serving
        self.serving = None if bench is None else ServingRun(bench, attempt.run.team, attempt.run.name)

    def submit(self, run) -> None:
        pins = existing(self.api, self.pins, lambda text: self.out(f"{self.attempt.folder}: {text}"))
        job = bench_env(sendable(self.cfg, pinned(_objects(self.api, self.cfg, run).rayjob, pins or {}),
                                     self.repository))
        self.api.submit(job)
        self.submitted.append(job["metadata"]["name"])
        self.watch.submitted(loads=run.attempt > 1)  # an earlier attempt of the run may have left a save

    def jobs(self, run) -> list[dict]:
        return [j for j in self.api.rayjobs(run.team, run.name) if j["metadata"]["name"] in self.submitted]

    def run(self, poll_s: float, cloudwatch: object | None) -> list[dict]:
        """Submit, watch, inject, resume, collect; the fault records."""
        run = attempt_of(self.attempt.run, self.api.next_attempt(self.attempt.run))  # a fresh attempt number
        self.submit(run)
        self.out(f"{self.attempt.folder}: submitted {run.name} as attempt {run.attempt}")
        while True:
            jobs = self.jobs(run)
            job = jobs[-1] if jobs else None
            self.seen.look(self.api, run.team, run.name, jobs)
            steps = parse_log(self.seen.logs.get(job["metadata"]["name"], "")).steps if job else []
            self.watch.stepped(max((s.rollout_id for s in steps), default=None))
            if self.pending and job is not None and not _finished(job):
                self.inject(run, job, steps)
            if self.serving is not None and job is not None:
                self.serving.poll(self.api, job, steps, _finished(job))
            if _finished(job):
                if (job.get("status") or {}).get("jobStatus") == "SUCCEEDED" or not self.records:
                    break
                last = self.records[-1]
                if "resumedAs" in last:
                    raise UnexplainedFailure(f"{job['metadata']['name']} failed after the resume from {last['kind']} at "
                                             f"step {last['step']}: no fault of the arm explains it (one resume a fault)")
                if (how := _recovered(last, self.seen.logs.get(last["rayjob"], ""))) is not None:
                    raise UnexplainedFailure(f"{job['metadata']['name']} failed after it had recovered from {last['kind']} "
                                             f"at step {last['step']} ({how}): no fault of the arm explains it")
                run = self.resume(run)
            self.watch.check()
            CLOCK.sleep(poll_s)
        collect(self.api, self.attempt, self.folder, self.records, self.seen, self.jobs(run),
                None if cloudwatch is None else (cloudwatch, self.cfg.cluster_name))
        if self.serving is not None:
            (self.folder / "serving.json").write_text(json.dumps(self.serving.result, indent=1))
        return self.records

    def inject(self, run, job: dict, steps: list) -> None:
        last = max((s.rollout_id for s in steps), default=-1)
        for step in sorted(s for s in self.pending if s <= last):
            record = self.injector.inject(self.api, self.pending.pop(step), run.team, run.name,
                                          job["metadata"]["name"], self.watch.limits.step_s) | {
                "step": step, "loggedStep": last, "rayjob": job["metadata"]["name"]}
            self.records.append(record)
            self.out(f"{self.attempt.folder}: {record['kind']} at step {step} on {record['target']}")

    def resume(self, run):
        """The job failed after a fault: the next attempt of the run, from its last complete checkpoint."""
        resumed = attempt_of(run, self.api.next_attempt(run))
        self.submit(resumed)
        self.out(f"{self.attempt.folder}: resumed as attempt {resumed.attempt}")
        self.records[-1]["resumedAs"] = f"{resumed.name}-{resumed.attempt}"
        return resumed

    def leave_as_found(self, err: BaseException) -> None:
        """Undo what ``run`` started, each step on its own (one failing does not stop the next), and say
        what was done and what could not be."""
        where, team, name = self.attempt.folder, self.attempt.run.team, self.attempt.run.name
        self.out(f"{where}: stopped by {type(err).__name__}: {err}")
        steps: list[tuple[str, Callable[[], str]]] = [
            ("fault engine", lambda: "; ".join(self.injector.undo()) or "nothing running" if self.injector else "none"),
            ("attempts", lambda: f"cancelled {', '.join(self.api.cancel(team, name)) or 'none (all finished)'}"),
            ("artifacts", lambda: incomplete(self.attempt, self.folder, self.records, self.seen,
                                             f"{type(err).__name__}: {err}"))]
        for what, step in steps:
            try:
                self.out(f"{where}: left as found: {what}: {step()}")
            except Exception as undo_err:  # noqa: BLE001 (report and go on to the next step)
                self.out(f"{where}: NOT undone: {what}: {type(undo_err).__name__}: {undo_err}")


def run_attempt(api: RunClient, cfg: ProgramConfig, exp: Experiment, attempt: Attempt, folder: Path,
                repository: str, out: Callable[[str], None], poll_s: float = POLL_S,
                cloudwatch: object | None = None, injector: Injector | None = None,
                logs: Callable | None = None, pins: dict[str, list[str]] | None = None) -> list[dict]:
    """Submit, watch, inject, resume, collect. On any failure the cluster is left as it was found:
    the fault engine's experiments stopped and tags removed, the run's unfinished attempts cancelled
    (``RunClient.cancel``: suspended, their Ray clusters deleted), what was seen collected and marked
    ``INCOMPLETE`` with the reason; each thing left or undone is printed, then the error goes on.
    ``pins``: pool -> the nodes attempts are held to (``pinning``). Returns the fault records."""
    one = AttemptRun(api, cfg, exp, attempt, folder, repository, out, injector, logs, pins)
    try:
        records = one.run(poll_s, cloudwatch)
    except BaseException as err:
        one.leave_as_found(err)
        raise
    out(f"{attempt.folder}: collected")
    return records


def _dry_run(exp: Experiment, cfg: ProgramConfig, attempts: list[Attempt], repository: str,
             out: Callable[[str], None]) -> int:
    for a in attempts:
        objs = run_objects(cfg, a.run)
        out("---")  # one YAML document per attempt: the stream parses with yaml.safe_load_all
        out(f"# {a.folder}: {objs.gang.describe()}; faults: "
            f"{', '.join(f'{f.kind} at step {f.at_step}' for f in exp.arm(a.arm).faults) or 'none'}")
        job = bench_env(with_repository(objs.rayjob, repository or STACK_REPOSITORY))
        out(yaml.safe_dump(job, sort_keys=False))
    return 0


def chosen(attempts: list[Attempt], only: list[str] | None) -> list[Attempt]:
    """The attempts ``--only`` names (``<arm>/r<n>``), in run order; all without it."""
    if not only:
        return attempts
    unknown = sorted(set(only) - {a.folder for a in attempts})
    if unknown:
        raise ValueError(f"--only {unknown[0]}: not an attempt of the experiment; attempts: "
                         f"{', '.join(a.folder for a in attempts)}")
    return [a for a in attempts if a.folder in only]


def first_pins(exp: Experiment, out_dir: Path, skip: set[str]) -> tuple[str, dict[str, list[str]]] | None:
    """For ``--only``: the first attempt already collected in ``out_dir``, in run order, that the report compares
    (an arm without faults, not marked INCOMPLETE, not one of ``skip``) and its node set, which the report holds
    every compared attempt to (``checks.check_same_nodes``); None when there is none."""
    for a in schedule(exp):
        folder = out_dir / a.folder
        if a.folder in skip or exp.arm(a.arm).faults or (folder / INCOMPLETE).is_file() \
                or not (folder / "nodes.json").is_file():
            continue
        return a.folder, node_set(folder)
    return None


def _out_dir(path: Path, out_dir: Path, only: list[str] | None) -> None:
    """``out_dir`` with the experiment file in it; ``--only`` runs into a directory of this very file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    copied = out_dir / EXPERIMENT_FILE
    if only and copied.is_file() and copied.read_bytes() != Path(path).read_bytes():
        raise ValueError(f"--only: {copied} is another experiment file than {path}: run it again into that "
                         f"directory with the file it was collected for")
    shutil.copyfile(path, copied)


def run_experiment(path: Path, out_dir: Path | None, dry_run: bool, client: Callable[[], RunClient],
                   out: Callable[[str], None], repository: str = "", stack_dir: Path = STACKS_DIR,
                   cloudwatch: Callable[[str], object] | None = None, poll_s: float = POLL_S,
                   injector: Callable[[str, str], Injector] | None = None,
                   s3: Callable[[str], object] | None = None, log_bucket: str | None = None,
                   only: list[str] | None = None) -> int:
    """``cloudwatch(region)`` makes the boto3 CloudWatch client when the metrics are to be collected;
    ``injector(region, cluster)`` the fault engine (FIS, EC2 clients) when an arm has faults;
    ``s3(region)`` the client that reads driver logs from ``log_bucket`` once their heads are gone;
    ``only``: the attempts to run (``<arm>/r<n>``), each under a fresh attempt number."""
    exp = load_experiment(path)
    cfg = gate.read(exp.stack, stack_dir)
    attempts = chosen(schedule(exp), only)
    if dry_run:
        return _dry_run(exp, cfg, attempts, repository, out)
    if out_dir is None:
        raise ValueError("run: --out DIR is needed to collect the artifacts")
    if not log_bucket or s3 is None:
        raise ValueError("run: --log-bucket BUCKET (pulumi stack output checkpointBucket) is needed: the end of a "
                         "driver log is read from the bucket once its head is gone")
    for a in attempts:  # refuse before submitting anything
        sendable(cfg, run_objects(cfg, a.run).rayjob, repository)
    api = client()
    faulted = [a for a in attempts if exp.arm(a.arm).faults]
    engine = injector(cfg.region, cfg.cluster_name) if injector and faulted else None
    if engine is not None:  # permissions before the first attempt, not hours into the experiment
        for line in engine.preflight(api, exp, faulted):
            out(f"fault engine: {line}")
    _out_dir(path, out_dir, only)
    cw = None if cloudwatch is None else cloudwatch(cfg.region)
    logs = log_source(cfg, s3(cfg.region) if s3 and log_bucket else None, log_bucket)
    pins = None
    if only:  # pinned like the attempts collected before, where their nodes still exist (``existing``)
        first = first_pins(exp, out_dir, set(only))
        if first is not None:
            out(f"--only: pinned to the nodes of {first[0]}, the first attempt the report compares")
            pins = first[1]
    missed = _run_all(api, cfg, exp, attempts, out_dir, repository, out, poll_s, cw, engine, logs, room(exp, cfg),
                      pins)
    if missed:
        again = " ".join(f"--only {f}" for f in missed)
        raise LookupError(f"{len(missed)} of {len(attempts)} attempts INCOMPLETE ({'; '.join(dict.fromkeys(missed.values()))}); run "
                          f"them again: python -m bench run {path} --out {out_dir} {again} ...")
    out(f"collected {len(attempts)} attempts into {out_dir}; next: python -m bench report {out_dir}")
    return 0


def _run_all(api: RunClient, cfg: ProgramConfig, exp: Experiment, attempts: list[Attempt], out_dir: Path,
             repository: str, out: Callable[[str], None], poll_s: float, cw, engine, logs,
             space: Room | None = None, pins: dict[str, list[str]] | None = None) -> dict[str, str]:
    """Every attempt in order, pinned while the pins' nodes exist (``pins``: the set to start from, else the first
    finished attempt's); the incomplete ones with their reasons. After an INCOMPLETE attempt, whose saves stay,
    the experiment stops when the next attempt would not fit beside them (``bench.storage``): the attempts not run
    are returned too."""
    missed: dict[str, str] = {}
    for i, a in enumerate(attempts):
        free = _removes_nodes(exp, a.arm)
        try:
            run_attempt(api, cfg, exp, a, out_dir / a.folder, repository, out, poll_s, cw, engine, logs,
                        None if free else pins)
        except (Overdue, FaultError, UnexplainedFailure) as err:  # recorded INCOMPLETE with the reason, the cluster left as found
            missed[a.folder] = str(err)
            if space is not None and len(missed) > space.incomplete_held and attempts[i + 1:]:
                why = (f"not run: the saves of {len(missed)} INCOMPLETE attempts stay on the file system (up to "
                       f"{space.left / GB:,.0f} GB each) and the next attempt's {space.peak / GB:,.0f} GB would not "
                       f"fit beside them in {space.usable / GB:,.0f} GB usable")
                out(f"stopped after {a.folder}: {why.removeprefix('not run: ')}; run them again with --only")
                missed |= {b.folder: why for b in attempts[i + 1:]}
                break
            continue
        if not free and (pins is None or existing(api, pins) != pins):
            pins = node_set(out_dir / a.folder)  # the first finished attempt's nodes, or the set that replaced it
    return missed
