"""Benchmark of the shared reward service under a flood: N teams send crafted requests (each grading
runs to the CPU limit, each body the largest the server accepts) while one honest team sends a light
request every ``--period-ms``; the honest team's latency (p50, p99, max) and answers, the flood's answers,
and the server's peak resident memory.

    python benchmarks/reward_flood.py [--teams 3] [--flood 16] [--seconds 30] [--cpus 4]
                                      [--server workloads/pod/reward_server.py] [--api new|old] [--json out.json]
    python benchmarks/reward_flood.py --write result.json [result.json ...]   # the BENCHMARKS.md section

    # the server before per-team limits, as measured in BENCHMARKS.md:
    git show a26934c^:workloads/pod/reward_server.py > /tmp/before.py
    python benchmarks/reward_flood.py --api old --server /tmp/before.py --teams 2 --flood 5 --cpus 1

The server runs in its own process pinned to ``--cpus`` CPUs (``os.sched_setaffinity``: what a container's
CPU limit leaves it; the new server reads that as its CPU count when ``cpu.max`` is ``max``); the clients
run on the other CPUs. ``--api old`` drives the server as it was before per-team limits (one port,
``server(...)``, ``WORKERS = os.cpu_count()``), from a copy of that file: every team then calls the one port.
The grader is this file's: a crafted request burns CPU until the server's limit stops it, an honest one
does about a millisecond of work, so the figures are the server's, not Miles' rules'.
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from sections import rewrite  # benchmarks/sections.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- reward-flood -->", "<!-- /reward-flood -->"
HONEST = {"prompt": "1+1?", "response": "\\boxed{2}", "label": "2", "kind": "honest"}


def grade(body: dict) -> float:
    """The bench's grader (in the server's grading child): a crafted request never finishes."""
    if body.get("kind") == "crafted":
        while True:
            pass
    return float(sum(range(20_000)) > 0)


# --- the server process ----------------------------------------------------------------------------

def serve(path: str, api: str, cpus: list[int]) -> None:
    os.sched_setaffinity(0, cpus)
    spec = importlib.util.spec_from_file_location("reward_server", path)
    rs = sys.modules["reward_server"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rs)
    teams = json.loads(sys.stdin.readline())
    if api == "old":
        httpd = rs.server(grade, host="127.0.0.1", port=0)
        ports, servers, facts = {t: httpd.server_address[1] for t in teams}, [httpd], {"workers": rs.WORKERS}
    else:
        threading.stack_size(512 * 1024)
        servers = rs.servers(grade, host="127.0.0.1", ports={t: 0 for t in teams})
        ports = {t: s.server_address[1] for t, s in zip(teams, servers)}
        facts = {"runningPerTeam": servers[0].share.running, "waitingPerTeam": servers[0].share.waiting,
                 "maxBody": rs.MAX_BODY, "cpus": rs.cgroup_cpus()}
    facts["maxBody"] = facts.get("maxBody", rs.MAX_BODY)
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print(json.dumps({"ports": ports, **facts}), flush=True)
    # Until the bench kills the process group. Not blocked reading stdin: a grading child (forked from
    # another thread) would inherit stdin's lock held, and multiprocessing closes stdin in the child.
    threading.Event().wait()


# --- the clients -----------------------------------------------------------------------------------

def post(port: int, data: bytes, timeout: float = 300) -> tuple[int | str, float]:
    start = time.monotonic()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        conn.request("POST", "/reward", body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        status: int | str = resp.status
        conn.close()
    except OSError as err:
        status = type(err).__name__
    return status, time.monotonic() - start


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def client(kind: str, port: int, connections: int, body_bytes: int, seconds: float, period_ms: float) -> None:
    """One client process (its own interpreter, so a flood's threads never delay the honest team's
    client): ``flood`` keeps ``connections`` crafted requests in flight for ``seconds``; ``honest``
    sends one light request every ``period_ms``. Prints its answers (and the honest latencies) as JSON."""
    end = time.monotonic() + seconds
    if kind == "honest":
        out, data = [], json.dumps(HONEST).encode()
        while time.monotonic() < end:
            tick = time.monotonic()
            out.append(post(port, data))
            time.sleep(max(0.0, period_ms / 1000 - (time.monotonic() - tick)))
        print(json.dumps(out), flush=True)
        return
    crafted = json.dumps({"response": "\\boxed{9**9**9}", "label": "1", "kind": "crafted", "pad": ""}).encode()
    body = crafted[:-2] + b"x" * (body_bytes - len(crafted)) + crafted[-2:]  # the largest accepted
    seen: Counter = Counter()
    lock = threading.Lock()

    def flooder() -> None:
        while time.monotonic() < end:
            status, _ = post(port, body)
            with lock:
                seen[str(status)] += 1
    for _ in range(connections):
        threading.Thread(target=flooder, daemon=True).start()
    time.sleep(max(0.0, end - time.monotonic()))
    with lock:
        print(json.dumps(dict(seen)), flush=True)
    os._exit(0)  # requests still in flight are not counted


def run(args: argparse.Namespace) -> dict:
    ncpu = os.cpu_count() or 1
    server_cpus = list(range(min(args.cpus, ncpu)))
    os.sched_setaffinity(0, [c for c in range(ncpu) if c not in server_cpus] or server_cpus)
    teams = [f"flood-{i}" for i in range(args.teams)] + ["honest"]
    proc = subprocess.Popen([sys.executable, __file__, "--serve", args.server, "--api", args.api,
                             "--cpus", str(args.cpus)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    proc.stdin.write(json.dumps(teams) + "\n")
    proc.stdin.close()
    facts = json.loads(proc.stdout.readline())
    ports = facts.pop("ports")

    def spawn(kind: str, port: int, seconds: float) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, __file__, "--client", kind, "--port", str(port), "--flood",
                                 str(args.flood), "--body-bytes", str(facts["maxBody"]), "--seconds", str(seconds),
                                 "--period-ms", str(args.period_ms)], stdout=subprocess.PIPE, text=True)
    floods = [spawn("flood", ports[t], args.warm + args.seconds) for t in teams[:-1]]
    time.sleep(args.warm)
    honest = [tuple(x) for x in json.loads(spawn("honest", ports["honest"], args.seconds).communicate()[0])]
    rss = peak_rss_mib(proc.pid)
    flood: Counter = Counter()
    for f in floods:
        flood.update(json.loads(f.communicate()[0]))
    os.killpg(proc.pid, signal.SIGKILL)  # the server and its grading children
    proc.wait()
    times = [t for s, t in honest if s == 200]
    return {"api": args.api, "server": args.server, "teams": args.teams, "floodPerTeam": args.flood,
            "serverCpus": len(server_cpus), "seconds": args.seconds, "periodMs": args.period_ms, **facts,
            "bodyBytes": facts["maxBody"],
            "honest": {"sent": len(honest), "statuses": dict(Counter(str(s) for s, _ in honest)),
                       "p50": statistics.median(times) if times else None,
                       "p99": percentile(times, 0.99) if times else None,
                       "max": max(times) if times else None},
            "flood": dict(flood), "serverPeakRssMiB": round(rss), "machine": machine()}


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return f"{os.cpu_count()} CPUs ({cpu}), Linux {platform.release()}, Python {platform.python_version()}"


# --- BENCHMARKS.md ---------------------------------------------------------------------------------

def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:,.0f}"


def section(results: list[dict], bound_ms: float, note: str) -> str:
    rows = ["| server | teams flooding x connections | body (bytes) | grading slots | honest sent | honest answers | "
            "honest p50 / p99 / max (ms) | flood answers | server peak RSS (MiB) |", "|---|---|---:|---|---:|---|---|---|---:|"]
    for r in results:
        slots = (f"{r['workers']} shared (os.cpu_count)" if r["api"] == "old"
                 else f"{r['runningPerTeam']} per team + {r['waitingPerTeam']} waiting")
        h, quiet = r["honest"], not r["floodPerTeam"]
        label = "before" if r["api"] == "old" else "no flood" if quiet else "per-team limits"
        flood = "none" if quiet else f"{r['teams']} x {r['floodPerTeam']}"
        rows.append(f"| {label} | {flood} | {r['bodyBytes']:,} | {slots} | {h['sent']} | {h['statuses']} | "
                    f"{_ms(h['p50'])} / {_ms(h['p99'])} / {_ms(h['max'])} | {r['flood']} | {r['serverPeakRssMiB']:,} |")
    r0 = results[0]
    return "\n".join([
        BEGIN, "## Reward service under one team's flood (`python benchmarks/reward_flood.py`)", "",
        f"- Machine: {r0['machine']}; the server pinned to {r0['serverCpus']} CPU(s) (`--cpus`), the clients, one "
        "process per team, on the others.",
        "- Method: each flooding team keeps that many connections busy with crafted requests (each grading burns CPU "
        "until the server's 10 s limit; each body the largest the server accepts: 64 MiB before, `maxBodyKib` now); "
        f"the honest team sends one light request every {r0['periodMs']:.0f} ms for {r0['seconds']:.0f} s after a "
        "5 s warm-up; its latency is from sending to the whole answer. `before`: the server as it was (one port for "
        "everyone, `WORKERS = os.cpu_count()`, the body read and parsed before waiting); now: a port per team.",
        f"- Bound held: with per-team limits the honest team's p99 is under {bound_ms:,.0f} ms in every row below "
        "(checked by `--write`).",
        f"- {note}", "", *rows, END])


def write(paths: list[str], bound_ms: float, note: str) -> None:
    results = [json.loads(Path(p).read_text()) for p in paths]
    for r in results:
        if r["api"] != "old" and not (r["honest"]["p99"] is not None and r["honest"]["p99"] * 1000 < bound_ms):
            raise SystemExit(f"{r['server']}: honest p99 {_ms(r['honest']['p99'])} ms is not under {bound_ms} ms")
    text = section(results, bound_ms, note)
    rewrite(ROOT / "BENCHMARKS.md", text, BEGIN, END)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--serve", metavar="PATH", help=argparse.SUPPRESS)
    p.add_argument("--client", choices=["flood", "honest"], help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--body-bytes", type=int, help=argparse.SUPPRESS)
    p.add_argument("--server", default=str(ROOT / "workloads" / "pod" / "reward_server.py"))
    p.add_argument("--api", choices=["new", "old"], default="new")
    p.add_argument("--teams", type=int, default=3, help="flooding teams")
    p.add_argument("--flood", type=int, default=16, help="connections each flooding team keeps busy")
    p.add_argument("--cpus", type=int, default=4, help="CPUs the server may run on")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--warm", type=float, default=5)
    p.add_argument("--period-ms", type=float, default=50)
    p.add_argument("--json", help="write the result here")
    p.add_argument("--write", nargs="+", metavar="RESULT", help="write BENCHMARKS.md's section from results")
    p.add_argument("--bound-ms", type=float, default=1000)
    p.add_argument("--note", default="", help="what the figures are (for --write)")
    args = p.parse_args()
    if args.serve:
        serve(args.serve, args.api, list(range(min(args.cpus, os.cpu_count() or 1))))
    elif args.client:
        client(args.client, args.port, args.flood, args.body_bytes, args.seconds, args.period_ms)
    elif args.write:
        write(args.write, args.bound_ms, args.note)
    else:
        result = run(args)
        print(json.dumps(result, indent=1))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
