"""The burn-in on one GPU node: run the checks within the pool's budget, then write the result on the node.

Runs in the pod of the pool's burn-in DaemonSet (``nodes.render``), in the workload image, with the
standard library and the image's torch (through ``torchrun``). Its files sit beside
``workloads/preflight.py`` and ``workloads/fabric_bench.py`` in the burn-in ConfigMap: the preflight's
checks are called, the bench is run, never copied. Steps, each within what is left of the budget
(counted from the start of the pod's DCGM container, which runs first):

1. preflight: every check of ``preflight.checks`` with the pool's Ray pod arguments;
2. DCGM: the result ``dcgmi diag -r <level> -j`` left in the results folder (``nodes.render``);
3. NCCL: ``fabric_bench`` on this node's GPUs (all-reduce and all-to-all), each collective's peak
   busbw against the acceptance's floor (a derived floor only warns, as in the acceptance report);
   wrong results fail;
4. EFA loopback: ``fi_pingpong`` (built with libfabric beside ``fi_info``, its ``util/``; man page
   fi_pingpong(1): ``-p efa -e rdm``, data verified with ``-v``, ``-d`` on both sides)
   from each EFA device to the next one of the same node, shared memory off
   (``FI_EFA_ENABLE_SHM_TRANSFER=0``, fi_efa(7)) so the bytes cross the devices.

Guarantees: the decision is kept in the pod's results folder before it is written, and written once;
a container that starts again after a start without a decision (it died, or the kubelet's liveness
probe stopped it past its budget) records a failure naming the step it was in, never a pass. Pass:
the burn-in taint goes, result and time labels, figures annotation, an Event. Fail: the taint stays,
the reason annotation, a Warning Event, and with ``replace`` the instance is marked unhealthy
(``nodes.replace``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

try:  # in the pod: the ConfigMap puts them beside this file
    import fabric_bench
    import incluster
    import marks
    import preflight
    import replace
except ImportError:
    from nodes import incluster, marks, replace
    from workloads import fabric_bench, preflight

LOOPBACK_PORT = 47592
"""fi_pingpong's default control port (fi_pingpong(1), ``-B``/``-P``)."""
LOOPBACK_ARGS = ["-p", "efa", "-e", "rdm", "-I", "100", "-S", "65536", "-v"]
LOOPBACK_ENV = {"FI_EFA_ENABLE_SHM_TRANSFER": "0"}


def _failed(why: str) -> list[str]:
    return [why]


def step_preflight(plan: dict, left: float, results: Path) -> tuple[list[str], dict]:
    problems = []
    for name, check in preflight.checks(preflight.parse_args(plan["preflight"])):
        try:
            problem = check()
        except Exception as e:  # noqa: BLE001 - a check that breaks is a failed check
            problem = f"{name}: {type(e).__name__}: {e}"
        if problem:
            problems.append(f"preflight {problem}")
    return problems, {"preflight": "ok" if not problems else "failed"}


def failed_tests(doc: Any, name: str = "") -> list[str]:
    """Names of the tests a ``dcgmi diag -j`` document reports as failed, whatever its nesting (the
    layout changed between DCGM 3 and 4): any object whose ``status`` or ``result`` is Fail."""
    out: list[str] = []
    if isinstance(doc, dict):
        here = str(doc.get("name") or doc.get("test_name") or name)
        if str(doc.get("status", doc.get("result", ""))).lower() == "fail":
            out.append(here or "?")
        for v in doc.values():
            out += failed_tests(v, here)
    elif isinstance(doc, list):
        for v in doc:
            out += failed_tests(v, name)
    return sorted(set(out))


def step_dcgm(plan: dict, left: float, results: Path) -> tuple[list[str], dict]:
    level = plan["dcgmLevel"]
    rc_file = results / "dcgm.rc"
    if not rc_file.exists():
        return _failed("DCGM: dcgmi diag left no result (the DCGM container did not run)"), {}
    rc = int(rc_file.read_text().strip() or "1")
    if rc == 124:
        return _failed(f"DCGM: dcgmi diag -r {level} did not finish within {plan['dcgmSeconds']} s"), {"dcgm": "timeout"}
    try:
        failed = failed_tests(json.loads((results / "dcgm.json").read_text()))
    except (OSError, ValueError):
        err = (results / "dcgm.err").read_text()[-300:] if (results / "dcgm.err").exists() else ""
        return _failed(f"DCGM: dcgmi diag -r {level} gave no JSON (exit {rc}) {err}".strip()), {"dcgm": "error"}
    if failed or rc != 0:
        return _failed(f"DCGM: dcgmi diag -r {level} failed (exit {rc}): {', '.join(failed) or 'see its log'}"), \
            {"dcgm": "failed", "dcgmFailed": failed}
    return [], {"dcgm": f"pass (level {level})"}


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


def step_nccl(plan: dict, left: float, results: Path) -> tuple[list[str], dict]:
    out = results / "fabric.json"
    low, high = plan["benchSizes"]
    cmd = ["torchrun", "--standalone", f"--nproc-per-node={plan['gpus']}", fabric_bench.__file__,
           "--scope", "node", "--ops", ",".join(fabric_bench.OPS), "--min-bytes", low, "--max-bytes", high,
           "--out", str(out)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1.0, left))
    except subprocess.TimeoutExpired:
        return _failed(f"NCCL: the intra-node bench did not finish within {left:.0f} s"), {}
    except FileNotFoundError:
        return _failed("NCCL: torchrun not found in the image"), {}
    if not out.exists():
        return _failed(f"NCCL: the intra-node bench failed (exit {done.returncode}): {done.stderr[-300:]}"), {}
    return judge_bench(json.loads(out.read_text()), plan["floors"])


def rate(output: str) -> float | None:
    """MB/sec of fi_pingpong's result line (the column under its ``MB/sec`` header)."""
    lines = [ln.split() for ln in output.splitlines() if ln.strip()]
    for i, cols in enumerate(lines):
        if "MB/sec" in cols and i + 1 < len(lines) and len(lines[i + 1]) == len(cols):
            try:
                return float(lines[i + 1][cols.index("MB/sec")])
            except ValueError:
                return None
    return None


def loopback(server_dev: str, client_dev: str, timeout: float) -> tuple[str | None, float | None]:
    """One fi_pingpong between two of this node's EFA devices: (problem, MB/s)."""
    env = {**os.environ, **LOOPBACK_ENV}
    server = subprocess.Popen(["fi_pingpong", *LOOPBACK_ARGS, "-d", server_dev, "-B", str(LOOPBACK_PORT)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        time.sleep(1)  # the server binds its control port before the client connects
        client = subprocess.run(["fi_pingpong", *LOOPBACK_ARGS, "-d", client_dev, "-P", str(LOOPBACK_PORT),
                                 "127.0.0.1"], capture_output=True, text=True, timeout=timeout, env=env)
        server.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"EFA {server_dev} <- {client_dev}: no answer within {timeout:.0f} s", None
    finally:
        if server.poll() is None:
            server.kill()
    if client.returncode or server.returncode:
        return (f"EFA {server_dev} <- {client_dev}: fi_pingpong failed (client {client.returncode}, server "
                f"{server.returncode}): {(client.stdout + client.stderr)[-200:]}"), None
    return None, rate(client.stdout)


def step_efa(plan: dict, left: float, results: Path) -> tuple[list[str], dict]:
    listing = preflight.run(["fi_info", "-p", "efa", "-t", "FI_EP_RDM"])
    devices = sorted(preflight.efa_domains(listing or ""))
    if len(devices) < 2:
        return _failed(f"EFA: {len(devices)} EFA device(s) visible, a loopback needs two"), {}
    deadline = time.monotonic() + left
    problems, rates = [], {}
    for i, dev in enumerate(devices):
        peer = devices[(i + 1) % len(devices)]
        problem, mbs = loopback(dev, peer, max(1.0, min(30.0, deadline - time.monotonic())))
        if problem:
            problems.append(problem)
        elif mbs is not None:
            rates[dev] = mbs
    figures = {"efaLoopbackPairs": len(devices) - len(problems)}
    if rates:
        figures["efaLoopbackMBsMin"] = min(rates.values())
    return problems, figures


STEPS: list[tuple[str, Callable[[dict, float, Path], tuple[list[str], dict]]]] = [
    ("preflight", step_preflight), ("dcgm", step_dcgm), ("nccl", step_nccl), ("efa", step_efa)]


def _save(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, sort_keys=True))
    tmp.replace(path)


def decide(plan: dict, results: Path, clock: Callable[[], float] = time.time) -> dict:
    """The verdict ({result, reason, figures}), kept in ``results``: decided once per pod."""
    verdict_file, progress_file = results / "verdict.json", results / "progress.json"
    if verdict_file.exists():
        return json.loads(verdict_file.read_text())
    started = float((results / "started").read_text()) if (results / "started").exists() else clock()
    budget = plan["budgetSeconds"]
    if progress_file.exists():  # a start without a verdict: the container died or was stopped
        progress = json.loads(progress_file.read_text())
        late = clock() - started >= budget
        why = (f"did not finish within its budget of {budget} s" if late
               else "its container stopped before the result (see kubectl describe pod)")
        verdict = {"result": marks.FAILED, "figures": progress["figures"],
                   "reason": f"burn-in {why}, in step {progress['step']}"}
    else:
        problems: list[str] = []
        figures: dict[str, Any] = {}
        skip = {step for step, allowance in plan["steps"].items() if not allowance}
        for step, run in STEPS:
            if step in skip:
                continue
            _save(progress_file, {"step": step, "figures": figures})
            left = started + budget - clock()
            if left <= 0:
                problems.append(f"burn-in did not finish within its budget of {budget} s, in step {step}")
                break
            found, figs = run(plan, left, results)
            problems += found
            figures.update(figs)
        figures["seconds"] = round(clock() - started)
        verdict = {"result": marks.FAILED if problems else marks.PASSED, "figures": figures,
                   "reason": "; ".join(problems) or None}
    _save(verdict_file, verdict)
    return verdict


def report(api: incluster.Api, node_name: str, namespace: str, plan: dict, verdict: dict,
           now: datetime, attempts: int = 5) -> None:
    """Write the verdict on the node (retried on a 409 conflict), then its Event, then the replacement."""
    for attempt in range(attempts):
        node = api.node(node_name)
        try:
            api.patch_node(node_name, marks.result_patch(node, plan["taint"], verdict["result"], verdict["figures"],
                                                         verdict["reason"], now))
            break
        except incluster.ApiError as e:
            if e.status != 409 or attempt == attempts - 1:
                raise
    passed = verdict["result"] == marks.PASSED
    message = (f"burn-in passed in {verdict['figures'].get('seconds', '?')} s" if passed
               else f"burn-in failed: {verdict['reason']}")
    api.create_event(marks.event(node, namespace, verdict["result"], message, now))
    if not passed and plan.get("replace"):
        replace.mark_unhealthy(node)


def main(argv: list[str] | None = None, api: incluster.Api | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", required=True, help="the pool's plan, JSON (nodes.burn_in.PoolBurnIn.agent_plan)")
    p.add_argument("--results", default="/results")
    args = p.parse_args(argv)
    plan, results = json.loads(args.plan), Path(args.results)
    verdict = decide(plan, results)
    print(f"burn-in {verdict['result']}: {verdict['reason'] or ''} {json.dumps(verdict['figures'])}", flush=True)
    if not (results / "written").exists():
        report(api or incluster.Api(), os.environ["NODE_NAME"], os.environ["POD_NAMESPACE"], plan, verdict,
               datetime.now(timezone.utc))
        (results / "written").write_text("1")
    return 0


if __name__ == "__main__":
    main()
    while True:  # stay until the DaemonSet takes the pod off the node (its result label no longer matches)
        time.sleep(3600)
