"""The control-plane stage's cost, for BENCHMARKS.md: each component's cold build (recorded by
``controlplane.build`` beside its binaries) and the stage's warm run (binaries cached), timed here.

    python -m controlplane.benchmark --write     # runs `bash controlplane/run`, rewrites its section
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.sections import rewrite
from controlplane.build import BUILD_SECONDS, bin_dir
from controlplane.versions import COMPONENTS

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- controlplane-stage -->", "<!-- /controlplane-stage -->"


def section(warm_s: float, result: str) -> str:
    rows = []
    for c in COMPONENTS:
        seconds = (bin_dir(c) / BUILD_SECONDS).read_text().strip()
        rows.append(f"| {c.name} | `{c.module}@{c.version}` | {', '.join(c.binaries)} | {seconds} |")
    cold = sum(int((bin_dir(c) / BUILD_SECONDS).read_text()) for c in COMPONENTS)
    return "\n".join([
        BEGIN, "## Control-plane stage (`bash controlplane/run`)", "",
        f"Measured {datetime.date.today()} on this machine (2 cores). Cold: `go build` of each component from an "
        "empty module and build cache, module downloads included (sequential, one component after another; the builds recorded here ran while other work loaded the machine, load average 4-12). "
        "Warm: the whole stage with every binary cached, `time.perf_counter` around `bash controlplane/run`.", "",
        "| component | module | binaries | cold build s |", "|---|---|---|---:|", *rows,
        f"| **all** | | | **{cold}** |", "",
        f"Warm stage: {warm_s:.0f} s ({result}).", END])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the section of BENCHMARKS.md")
    args = parser.parse_args()
    start = time.perf_counter()
    done = subprocess.run(["bash", "controlplane/run"], cwd=ROOT, capture_output=True, text=True)
    warm = time.perf_counter() - start
    result = (done.stdout.strip().splitlines() or ["no output"])[-1]
    if done.returncode:
        print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
        return done.returncode
    text = section(warm, result)
    print(text)
    if args.write:
        rewrite(ROOT / "BENCHMARKS.md", text, BEGIN, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
