"""What each fault of a fault arm did, from the attempt's own signals, not from step arithmetic.

- Outcome: the RayJob the fault hit (``faults.json`` ``rayjob``) and its final ``status.jobStatus``
  (KubeRay v1.7.0 ``rayjob_types.go``): ``SUCCEEDED`` means the job survived in place; ``FAILED`` (or
  ``STOPPED``) means it ended and the runner resubmitted it (``resumedAs``).
- Detection: the first Kubernetes Event about the attempt after the fault, with its own time
  (``bench.faults.detected``: KubeRay's ``CreatedWorkerPod``/``DeletedWorkerPod``, ...), as recorded.
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
- Back to steady: the first of ``STEADY_STEPS`` steps after the fault each at >= ``STEADY_FRACTION``
  of the throughput before it, by the perf lines' own timestamps.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from statistics import median

from .artifacts import Collected
from .experiment import Experiment
from .logparse import ANSI

TOKENS = "perf/tokens_per_gpu_per_sec"
STEADY_FRACTION = 0.9
STEADY_STEPS = 3
SAVED = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)\] successfully saved checkpoint from iteration\s+(\d+)")
LOADED = re.compile(r"successfully loaded checkpoint from \S+ .*at iteration (\d+)")
RECOVERED = re.compile(r"Recovered (\d+) dead rollout engines")


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace(" ", "T")).replace(tzinfo=timezone.utc)


def _iso(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def checkpoint_lines(text: str) -> dict[str, list]:
    """Saves (time, iteration), loads (line number, iteration), engine recoveries (line number, count)."""
    out: dict[str, list] = {"saved": [], "loaded": [], "recovered": []}
    for number, raw in enumerate(text.splitlines(), 1):
        line = ANSI.sub("", raw)
        if m := SAVED.search(line):
            out["saved"].append((_time(m.group(1)), int(m.group(2))))
        elif m := LOADED.search(line):
            out["loaded"].append((number, int(m.group(1))))
        elif m := RECOVERED.search(line):
            out["recovered"].append((number, int(m.group(1))))
    return out


def _outcome(c: Collected, fault: dict) -> tuple[str, str]:
    job = next((j for j in c.rayjobs if j["metadata"]["name"] == fault.get("rayjob")), None)
    status = ((job or {}).get("status") or {}).get("jobStatus", "unknown")
    if status == "SUCCEEDED":
        return status, f"survived in place (RayJob {fault.get('rayjob')} SUCCEEDED)"
    if any(g.get("rayjob") == fault.get("rayjob") and g["injectedAt"] > fault["injectedAt"] for g in c.faults):
        return "RUNNING", f"survived in place (RayJob {fault.get('rayjob')} ran on to the next fault, then {status})"
    then = f"; resubmitted as {fault['resumedAs']}" if fault.get("resumedAs") else "; not resubmitted"
    return status, f"job ended (RayJob {fault.get('rayjob')} {status}){then}"


def fault_figures(exp: Experiment, c: Collected) -> list[dict]:
    """One dict per fault of the attempt: its record plus outcome, detection, restart, resume and loss."""
    lines = checkpoint_lines(c.text)
    gpus = c.rollout_gpus()
    out, mark = [], 0
    for f in c.faults:
        injected = _iso(f["injectedAt"])
        status, outcome = _outcome(c, f)
        # the fault's place in the log: the step the runner had seen logged when it injected (its first
        # occurrence after the previous fault), so the log's own order splits before from after
        mark = next((s.line for s in c.log.steps if s.rollout_id == f.get("loggedStep", f.get("step"))
                     and s.line > mark), mark)
        before = [s for s in c.log.steps if s.line <= mark and TOKENS in s.metrics]
        after = [s for s in c.log.steps if s.line > mark and s.at is not None and TOKENS in s.metrics]
        saved = [it for at, it in lines["saved"] if at <= injected]
        restarted = status != "SUCCEEDED" and bool(f.get("resumedAs"))
        loaded = next((it for n, it in lines["loaded"] if n > mark), None) if restarted else None
        recovered = [count for n, count in lines["recovered"] if n > mark]
        fig = {**f, "outcome": outcome, "job_status": status,
               "detection_s": round((_iso(f["detectedAt"]) - injected).total_seconds(), 1) if f.get("detectedAt")
               else None,
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
        pre = median(s.metrics[TOKENS] for s in before)
        steady = next((max(0.0, (after[i].at - injected).total_seconds()) for i in range(len(after) - STEADY_STEPS + 1)
                       if all(s.metrics[TOKENS] >= STEADY_FRACTION * pre for s in after[i:i + STEADY_STEPS])), None)
        last = max(s.rollout_id for s in before)
        redone = sorted({s.rollout_id for s in after if s.rollout_id <= last})
        firsts = c.log.first()
        fig |= {"back_to_steady_s": None if steady is None else round(steady, 1), "last_step_before": last,
                "resumed_at_step": after[0].rollout_id, "steps_lost": len(redone),
                "tokens_lost": round(sum(firsts[i].metrics.get(TOKENS, 0.0) * gpus
                                         * firsts[i].metrics.get("perf/rollout_time", 0.0) for i in redone))}
        out.append(fig)
    return out
