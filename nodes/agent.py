"""The burn-in on one GPU node: run the checks within the pool's budget, then write the result on the node.

Runs in the pod of the pool's burn-in DaemonSet (``nodes.render``), in the workload image, with the
standard library and the image's torch (through ``torchrun``). Its files sit beside
``workloads/pod/preflight.py`` and ``workloads/pod/fabric_bench.py`` in the burn-in ConfigMap: the preflight's
checks are called, the bench is run, never copied. The budget is counted from the agent container's
first start (``started`` in the results folder), so neither the DCGM diagnostic (its own allowance)
nor the pull of the workload image (its own, ``nodes.burn_in.PULL_SECONDS``) eats into it. Steps:

1. preflight: every check of ``preflight.checks`` with the pool's Ray pod arguments;
2. DCGM: the result ``dcgmi diag -r <level> -j`` left in the results folder (``nodes.render``);
3. NCCL: ``fabric_bench`` on this node's GPUs (all-reduce and all-to-all), each collective's peak
   busbw against the acceptance's floor (a derived floor only warns, as in the acceptance report);
   wrong results fail;
4. EFA: the devices the pod holds, then a loopback between them (``nodes.efa``);
5. with a neighbour, once the node passed 1-4: a two-node all-reduce and an EFA ping-pong with another
   new node of the pool that the controller pairs it with (``nodes.pairs``); its failures are ``network``.

Guarantees: the decision is kept in the pod's results folder before it is written, and written once; a
pass is written no sooner than ``preflight.PASSED_UPTIME_SECONDS`` after the node's boot (``hold``);
a container that starts again after a start without a decision (it died, or the kubelet's liveness
probe stopped it past its budget) records a failure naming the step it was in, never a pass; one that
starts on a new boot (the node rebooted during the burn-in) starts the burn-in over and counts the
reboot in the figures. Pass:
the burn-in taint goes (and a quarantine), result and time labels, the boot id, figures annotation,
the capability labels from the preflight's checks, an Event. Fail: the quarantine taint, the reason
annotation, the fault label (``hardware`` only for a DCGM test failed with a hardware error category
(``nodes.dcgm``), an EFA device mounted into the pod that libfabric does not list, or EFA data corrupted
(``nodes.efa``); ``network`` for a failed check with a neighbour (``nodes.pairs``); preflight, image,
tooling, timeout and floor failures are ``software``), a Warning Event. The agent never replaces a
node: the controller (``nodes.controller``) does, for ``hardware`` only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

try:  # in the pod: the ConfigMap puts them beside this file
    import collectives
    import dcgm
    import efa
    import fabric_bench
    import incluster
    import marks
    import pairs
    import preflight
except ImportError:
    from nodes import collectives, dcgm, efa, incluster, marks, pairs
    from workloads.pod import fabric_bench, preflight

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
"""The kernel's boot id, the node's ``status.nodeInfo.bootID`` (kubelet reports it from this file through
cAdvisor's machine info): another value means the node rebooted."""
Found = tuple[list[str], dict, list[str]]
"""What a step finds: problems, figures, and the problems that are the node's hardware."""


def step_preflight(plan: dict, left: float, results: Path) -> Found:
    problems, failed = [], []
    for name, check in preflight.checks(preflight.parse_args(plan["preflight"])):
        try:
            problem = check()
        except Exception as e:  # noqa: BLE001 - a check that breaks is a failed check
            problem = f"{name}: {type(e).__name__}: {e}"
        if problem:
            problems.append(f"preflight {problem}")
            failed.append(name)
    return problems, {"preflight": "ok" if not problems else "failed", "preflightFailed": failed}, []


def step_dcgm(plan: dict, left: float, results: Path) -> Found:
    """The diagnostic's result as ``nodes.dcgm`` reads it: a failed test, a required test skipped or not
    run, a diagnostic that could not run or did not finish fail the node; hardware only for a failed test
    with a hardware error category."""
    level = plan["dcgmLevel"]
    rc_file = results / "dcgm.rc"
    if not rc_file.exists():
        return ["DCGM: dcgmi diag left no result (the DCGM container did not run)"], {}, []
    rc = int(rc_file.read_text().strip() or "1")
    if rc == 124:
        return [f"DCGM: dcgmi diag -r {level} did not finish within {plan['dcgmSeconds']} s"], {"dcgm": "timeout"}, []
    try:
        found = dcgm.diagnose(json.loads((results / "dcgm.json").read_text()), level)
    except (OSError, ValueError):
        err = (results / "dcgm.err").read_text()[-300:] if (results / "dcgm.err").exists() else ""
        return [f"DCGM: dcgmi diag -r {level} gave no JSON (exit {rc}) {err}".strip()], {"dcgm": "error"}, []
    problems = found.problems
    if found.failed or (rc != 0 and not problems):
        problems.insert(0, f"DCGM: dcgmi diag -r {level} failed (exit {rc}): {', '.join(found.failed) or 'see its log'}")
    if not problems:
        return [], {"dcgm": f"pass (level {level})"}, []
    figures = {"dcgm": "failed", "dcgmFailed": found.failed, **({"dcgmSkipped": found.skipped + found.missing}
                                                                  if found.skipped or found.missing else {})}
    return problems, figures, problems[:1] if found.hardware else []


def judge_bench(doc: dict, floors: list[dict]) -> tuple[list[str], dict]:
    """Each collective's peak busbw against its floor; wrong elements always fail."""
    problems, figures, warnings = [], {}, []
    limit = {f["op"]: f for f in floors}
    for series in doc.get("results", []):
        op = series["op"]
        peak = max(series["sizes"], key=lambda s: s["busbw"])
        wrong = sum(s.get("wrong", 0) for s in series["sizes"])
        figures[f"{op}GBs"] = round(peak["busbw"], 1)
        if wrong:
            problems.append(f"NCCL {op}: {wrong} wrong elements")
        f = limit.get(op)
        if f and peak["busbw"] < f["busbw"]:
            text = f"NCCL {op}: peak busbw {peak['busbw']:.1f} GB/s < floor {f['busbw']:g}"
            (warnings if f["advisory"] else problems).append(text)
    missing = sorted(set(limit) - {s["op"] for s in doc.get("results", [])})
    problems += [f"NCCL {op}: not measured" for op in missing]
    if warnings:
        figures["warnings"] = warnings
    return problems, figures


def step_nccl(plan: dict, left: float, results: Path) -> Found:
    out = results / "fabric.json"
    low, high = plan["benchSizes"]
    done, why = collectives.torchrun(["--standalone", f"--nproc-per-node={plan['gpus']}"],
                               ["--scope", "node", "--ops", ",".join(fabric_bench.OPS), "--min-bytes", low,
                                "--max-bytes", high, "--out", str(out)], left, "the intra-node bench")
    if done is None:
        return [f"NCCL: {why}"], {}, []
    if not out.exists():
        return [f"NCCL: the intra-node bench failed (exit {done.returncode}): {done.stderr[-300:]}"], {}, []
    return (*judge_bench(json.loads(out.read_text()), plan["floors"]), [])


def step_efa(plan: dict, left: float, results: Path) -> Found:
    return efa.step(plan, left)


STEPS: list[tuple[str, Callable[[dict, float, Path], Found]]] = [
    ("preflight", step_preflight), ("dcgm", step_dcgm), ("nccl", step_nccl), ("efa", step_efa)]


def _save(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, sort_keys=True))
    tmp.replace(path)


def _boot() -> str:
    return BOOT_ID.read_text().strip() if BOOT_ID.exists() else ""


def _begin(results: Path, clock: Callable[[], float]) -> tuple[float, int]:
    """When this boot's burn-in started, and how many reboots it has seen: a container started on a new
    boot (the node rebooted during the burn-in: kubelet runs the pod's containers again, the results
    folder stays) drops the old start, progress and verdict and starts over."""
    boot_file, start_file, reboots_file = results / "boot", results / "started", results / "reboots"
    reboots = int(reboots_file.read_text()) if reboots_file.exists() else 0
    if boot_file.exists() and boot_file.read_text() != _boot():
        for name in ("started", "progress.json", "verdict.json"):
            (results / name).unlink(missing_ok=True)
        reboots += 1
        reboots_file.write_text(str(reboots))
    boot_file.write_text(_boot())
    if not start_file.exists():  # the agent container's first start on this boot: its budget counts from here
        start_file.write_text(str(int(clock())))
    return float(start_file.read_text()), reboots


def _interrupted(progress: dict, budget: int, late: bool) -> dict:
    """The verdict of a start that finds a step begun and no verdict: the container died or was stopped."""
    why = (f"did not finish within its budget of {budget} s" if late
           else "its container stopped before the result (see kubectl describe pod)")
    return {"result": marks.FAILED, "figures": progress["figures"], "hardware": [],
            "reason": f"burn-in {why}, in step {progress['step']}"}


def _run_steps(plan: dict, results: Path, started: float, clock: Callable[[], float]) -> dict:
    problems: list[str] = []
    hardware: list[str] = []
    figures: dict[str, Any] = {}
    budget = plan["budgetSeconds"]
    skip = {step for step, allowance in plan["steps"].items() if not allowance}
    for step, run in STEPS:
        if step in skip:
            continue
        _save(results / "progress.json", {"step": step, "figures": figures})
        left = started + budget - clock()
        if left <= 0:
            problems.append(f"burn-in did not finish within its budget of {budget} s, in step {step}")
            break
        found, figs, hw = run(plan, left, results)
        problems += found
        hardware += hw
        warnings = [*figures.get("warnings", []), *figs.pop("warnings", [])]
        figures.update(figs, **({"warnings": warnings} if warnings else {}))
    figures["seconds"] = round(clock() - started)
    return {"result": marks.FAILED if problems else marks.PASSED, "figures": figures, "hardware": hardware,
            "reason": "; ".join(problems) or None}


def _with_neighbour(plan: dict, results: Path, verdict: dict, left: float, pairing: Callable[[float], Found]) -> dict:
    """The verdict after the check with a neighbour (``nodes.pairs``): its failures are ``network``."""
    _save(results / "progress.json", {"step": "neighbours", "figures": verdict["figures"]})
    problems, figures, _ = pairing(left)
    warnings = [*verdict["figures"].get("warnings", []), *figures.pop("warnings", [])]
    verdict["figures"].update(figures, **({"warnings": warnings} if warnings else {}))
    if problems:
        verdict.update(result=marks.FAILED, network=problems, reason="; ".join(problems))
    return verdict


def decide(plan: dict, results: Path, clock: Callable[[], float] = time.time,
           pairing: Callable[[float], Found] | None = None) -> dict:
    """The verdict ({result, reason, figures}), kept in ``results``: decided once per pod and boot."""
    verdict_file, progress_file = results / "verdict.json", results / "progress.json"
    if (results / "written").exists():
        return json.loads(verdict_file.read_text())
    started, reboots = _begin(results, clock)
    if verdict_file.exists():
        return json.loads(verdict_file.read_text())
    if progress_file.exists():
        verdict = _interrupted(json.loads(progress_file.read_text()), plan["budgetSeconds"],
                               clock() - started >= plan["budgetSeconds"])
    else:
        verdict = _run_steps(plan, results, started, clock)
        left = started + plan["budgetSeconds"] - clock()
        if verdict["result"] == marks.PASSED and pairing and plan["steps"].get("neighbours") and left > 0:
            verdict = _with_neighbour(plan, results, verdict, left, pairing)
            verdict["figures"]["seconds"] = round(clock() - started)
    if reboots:
        verdict["figures"]["reboots"] = reboots
    _save(verdict_file, verdict)
    return verdict


def hold(plan: dict, verdict: dict, uptime: str | None = None, sleep: Callable[[float], None] | None = None) -> None:
    """A pass is written no sooner than ``passedUptimeSeconds`` after the node's boot: a run pod's preflight
    that finds the node up for less, and no boot of its own, refuses it as rebooted since its burn-in
    (``preflight.check_boot``). Within the budget, which is at least that long (``nodes.burn_in.plan``)."""
    if verdict["result"] != marks.PASSED:
        return
    left = plan.get("passedUptimeSeconds", 0) - float(Path(uptime or preflight.UPTIME).read_text().split()[0])
    if left > 0:
        (sleep or time.sleep)(left)


def capability_labels(plan: dict, figures: dict) -> dict[str, str]:
    """Each capability label the pool's pods select, from the preflight checks that prove it; none when
    the preflight did not run."""
    if "preflight" not in figures:
        return {}
    failed = set(figures.get("preflightFailed") or [])
    return {label: "false" if failed & set(checks) else "true" for label, checks in plan.get("capabilities", {}).items()}


def fault_of(verdict: dict) -> str:
    return marks.HARDWARE if verdict.get("hardware") else marks.NETWORK if verdict.get("network") else marks.SOFTWARE


def report(api: incluster.Api, node_name: str, plan: dict, verdict: dict,
           now: datetime, attempts: int = 5) -> None:
    """Write the verdict on the node (made again from a fresh read on a 409 conflict), then its Event."""
    fault = fault_of(verdict)
    node = api.record(api.node(node_name), lambda n: marks.result_patch(
        n, plan["taint"], plan["quarantine"], verdict["result"], verdict["figures"], verdict["reason"], now,
        fault=fault, capabilities=capability_labels(plan, verdict["figures"])), attempts)
    if node is None:
        return
    passed = verdict["result"] == marks.PASSED
    message = (f"burn-in passed in {verdict['figures'].get('seconds', '?')} s" if passed
               else f"burn-in failed ({fault}): {verdict['reason']}")
    api.create_event(marks.event(node, verdict["result"], message, now))


def main(argv: list[str] | None = None, api: incluster.Api | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", required=True, help="the pool's plan, JSON (nodes.burn_in.PoolBurnIn.agent_plan)")
    p.add_argument("--results", default="/results")
    args = p.parse_args(argv)
    plan, results, api, node = json.loads(args.plan), Path(args.results), api or incluster.Api(), os.environ["NODE_NAME"]
    verdict = decide(plan, results, pairing=lambda left: pairs.step(plan, left, results, api, node,
                                                                     os.environ.get("POD_IP", "")))
    print(f"burn-in {verdict['result']}: {verdict['reason'] or ''} {json.dumps(verdict['figures'])}", flush=True)
    if not (results / "written").exists():
        hold(plan, verdict)
        report(api, node, plan, verdict, datetime.now(timezone.utc))
        (results / "written").write_text("1")
    return 0


if __name__ == "__main__":
    main()
    while True:  # stay until the DaemonSet takes the pod off the node (its result label no longer matches)
        time.sleep(3600)
