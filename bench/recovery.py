"""What each fault of a fault arm did, from the attempt's own signals, timed from the fault's own
timestamp, not from step arithmetic nor from when the runner last read the log.

- The kill and the first reactions to it: ``bench.reaction`` (the kill: the kubelet's ``Killing`` Event or
  FIS' action start; the run's: Miles' health check and recovery lines, the hit RayJob's end; the
  platform's: KubeRay's Events about the hit RayJob or its RayCluster). Two detection times, the run's
  and the platform's, each from the kill, and the report names each reaction.
- Outcome: the RayJob the fault hit (``faults.json`` ``rayjob``) and its final ``status.jobStatus``
  (KubeRay v1.7.0 ``rayjob_types.go``): ``SUCCEEDED`` means the job survived in place; ``FAILED`` (or
  ``STOPPED``) means it ended and the runner resubmitted it (``resumedAs``).
- Restart and resume, from the driver log's own lines:
  Megatron ``megatron/training/checkpointing.py`` (radixark/Megatron-LM 37f91617, the commit the Miles image builds, workloads/image/Dockerfile MEGATRON_COMMIT; the same text at 235952df :1062-1065 and :2543-2546):
  ``:742-745`` ``[<time>] successfully saved checkpoint from iteration <n> to <dir>`` once a save is
  complete (the tracker written), and ``:1923-1926`` ``successfully loaded checkpoint from <dir> ...
  at iteration <n>``; Miles 49cac7b5 saves with the rollout id as iteration (``train.py:83`` ->
  ``backends/megatron_utils/actor.py:688`` -> ``model.py:902``) and resumes at the loaded iteration + 1
  (``actor.py:212``); an engine restarted in place logs ``Recovered <n> dead rollout engines``
  (``miles/ray/rollout/server_group.py:209``).
  "Resumed from the last complete checkpoint" is: the iteration loaded after the fault equals the last
  iteration saved before it.
- Before and after: a step is before the fault when its rollout line's own time is at or before the
  kill, after it otherwise (the log's timestamps, whatever the runner had read when it injected).
- Back to steady: from the kill to the first of ``STEADY_STEPS`` steps after it each at >=
  ``STEADY_FRACTION`` of the median throughput of the steps before it (since the previous fault).
- Steps lost: steps completed before the kill that are logged again after it; tokens lost, theirs.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from statistics import median

from .artifacts import Collected
from .experiment import Experiment
from .logparse import ANSI, stamp
from .reaction import RECOVERED, hit_job, killed, platform_reacted, run_reacted, when

TOKENS = "perf/tokens_per_gpu_per_sec"
STEADY_FRACTION = 0.9
STEADY_STEPS = 3
SAVED = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)\] successfully saved checkpoint from iteration\s+(\d+)")
LOADED = re.compile(r"successfully loaded checkpoint from \S+ .*at iteration (\d+)")


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace(" ", "T")).replace(tzinfo=timezone.utc)


def checkpoint_lines(text: str) -> dict[str, list]:
    """Saves (time, iteration), loads (line number, iteration), engine recoveries (time, count)."""
    out: dict[str, list] = {"saved": [], "loaded": [], "recovered": []}
    for number, raw in enumerate(text.splitlines(), 1):
        line = ANSI.sub("", raw)
        if m := SAVED.search(line):
            out["saved"].append((_time(m.group(1)), int(m.group(2))))
        elif m := LOADED.search(line):
            out["loaded"].append((number, int(m.group(1))))
        elif (m := RECOVERED.search(line)) and (at := stamp(line)) is not None:
            out["recovered"].append((at, int(m.group(1))))
    return out


def _outcome(c: Collected, fault: dict) -> tuple[str, str]:
    status = (hit_job(c, fault).get("status") or {}).get("jobStatus", "unknown")
    if status == "SUCCEEDED":
        return status, f"survived in place (RayJob {fault.get('rayjob')} SUCCEEDED)"
    if any(g.get("rayjob") == fault.get("rayjob") and g["injectedAt"] > fault["injectedAt"] for g in c.faults):
        return "RUNNING", f"survived in place (RayJob {fault.get('rayjob')} ran on to the next fault, then {status})"
    then = f"; resubmitted as {fault['resumedAs']}" if fault.get("resumedAs") else "; not resubmitted"
    return status, f"job ended (RayJob {fault.get('rayjob')} {status}){then}"


def _timing(c: Collected, fault: dict) -> dict:
    kill, by = killed(c, fault)
    out = {"killedAt": kill.isoformat(), "killed_by": by}
    for who, reaction in (("run", run_reacted(c, fault, kill)), ("platform", platform_reacted(c, fault, kill, by))):
        out |= {f"{who}DetectedAt": None if reaction is None else reaction[0].isoformat(),
                f"{who}_detected_by": None if reaction is None else reaction[1],
                f"{who}_detection_s": None if reaction is None else round((reaction[0] - kill).total_seconds(), 1)}
    return out


def fault_figures(exp: Experiment, c: Collected) -> list[dict]:
    """One dict per fault of the attempt: its record plus outcome, detection, restart, resume and loss."""
    lines = checkpoint_lines(c.text)
    timings = [_timing(c, f) for f in c.faults]
    kills = [when(t["killedAt"]) for t in timings]
    out = []
    for i, (f, timing, kill) in enumerate(zip(c.faults, timings, kills)):
        since, until = (kills[i - 1] if i else None), (kills[i + 1] if i + 1 < len(kills) else None)
        status, outcome = _outcome(c, f)
        before = [s for s in c.log.steps if s.at is not None and s.at <= kill and (since is None or s.at > since)
                  and TOKENS in s.metrics]
        after = [s for s in c.log.steps if s.at is not None and s.at > kill and TOKENS in s.metrics]
        saved = [it for at, it in lines["saved"] if at <= kill]
        restarted = status != "SUCCEEDED" and bool(f.get("resumedAs"))
        loaded = next((it for n, it in lines["loaded"] if before and n > before[-1].line), None) if restarted else None
        recovered = [n for at, n in lines["recovered"] if at >= kill and (until is None or at < until)]
        fig = {**f, **timing, "outcome": outcome, "job_status": status,
               "last_saved_iteration": saved[-1] if saved else None, "loaded_iteration": loaded,
               "engines_recovered": sum(recovered)}
        if restarted:
            fig["resumed_from"] = (f"checkpoint iteration {loaded}" if loaded is not None else
                                   "no checkpoint load line after the restart")
            fig["resumed_from_last_checkpoint"] = loaded is not None and saved != [] and loaded == saved[-1]
        else:
            fig["resumed_from"] = "no restart" + (f" ({sum(recovered)} rollout engines recovered)" if recovered else "")
            fig["resumed_from_last_checkpoint"] = None
        if not before or not after:
            out.append({**fig, "error": "no step logged before or after the fault"})
            continue
        out.append(fig | _loss(c, before, after, kill, c.rollout_gpus()))
    return out


def _loss(c: Collected, before: list, after: list, kill, gpus: int) -> dict:
    pre = median(s.metrics[TOKENS] for s in before)
    steady = next(((after[i].at - kill).total_seconds() for i in range(len(after) - STEADY_STEPS + 1)
                   if all(s.metrics[TOKENS] >= STEADY_FRACTION * pre for s in after[i:i + STEADY_STEPS])), None)
    done = {s.rollout_id for s in c.log.steps if s.at is not None and s.at <= kill and TOKENS in s.metrics}
    redone = sorted({s.rollout_id for s in after} & done)
    firsts = c.log.first()
    return {"back_to_steady_s": None if steady is None else round(steady, 1), "last_step_before": before[-1].rollout_id,
            "resumed_at_step": after[0].rollout_id, "steps_lost": len(redone),
            "tokens_lost": round(sum(firsts[i].metrics.get(TOKENS, 0.0) * gpus
                                     * firsts[i].metrics.get("perf/rollout_time", 0.0) for i in redone))}
