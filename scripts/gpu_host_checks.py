"""The GPU-only checks the contract stage cannot run on a CPU, for one GPU host (eight GPUs for DeepEP's
intranode test and the expert-parallel engines), run from a checkout inside the workload image:

    python3 scripts/gpu_host_checks.py nccl              # one GPU: the NCCL torch maps, three ways
    python3 scripts/gpu_host_checks.py deepep [--tree D] # DeepEP V2's intranode test on the host's GPUs
    python3 scripts/gpu_host_checks.py engines FILE      # SGLang starts each engine with dummy weights

- ``nccl``: ``workloads/image/loaded_nccl.py`` (``ncclGetVersion`` of the mapped library), NCCL's own
  ``NCCL version X.Y.Z+cuda`` INFO line from a one-rank communicator on the GPU, and torch's compile-time
  ``torch.cuda.nccl.version()``; exit 1 unless the first two agree.
- ``deepep``: ``tests/elastic/test_ep.py`` of the image's DeepEP checkout (``/opt/deepep``, or ``--tree``: a
  built checkout elsewhere) over the host's GPUs, as the fabric acceptance job runs it within a node
  (``workloads.render.acceptance``). DeepEP V2 needs NCCL 2.30.4 or newer (deepseek-ai/DeepEP@dd758caf
  README.md "Requirements"): a host whose torch brings an older NCCL runs it only inside the workload image.
- ``engines``: FILE is a JSON list of rendered engines (``PYTHONPATH=. python contracts/tests/sglang_engines.py``
  writes every engine the product renders, with the model's config.json folder, and then each expert-parallel
  experiment arm whose engines span several nodes once more at one node per engine, named "... (one-host
  variant, not shipped)" with ``variant_of`` its arm's engine: EP over the node's GPUs, DeepEP V2 in the
  direct mode the platform renders for one node; those whose GPU count fits the host run: the count only, so
  seed-p5en's variants, DeepSeek's FP8 weights over 8 GPUs, need eight H200s, not H100s). Each starts as Miles would start
  it (``--sglang-*`` flags, TP/EP/DP sizes, the rollout pod's environment) with ``--load-format dummy``
  on the model's config.json (contracts/data/models), answers one request, and stops. Each engine left out is
  named with why: one across nodes (seed-p5en's and seed-ab's Miles EP arms as shipped: 16 GPUs over two
  nodes, the hybrid DeepEP V2 path over EFA) needs two hosts, never one. The summary counts shipped engines
  and one-host variants apart and names the shipped engine each variant stands in for; exit 1 when no engine
  ran or one did not answer, exit 3 (``ONLY_VARIANTS``) when every engine that ran answered but all were
  one-host variants: no shipped engine was checked.

Standard library, plus torch for ``nccl``; exit 0 only when every check that ran passed (and, for ``engines``, a
shipped engine was among them: on an eight-GPU host the shipped one-node engines fit, so ``engines`` exits 0 while
every shipped expert-parallel arm was skipped, each named in the summary).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from workloads.pod.preflight import NCCL_PROBE, sglang_tokens  # noqa: E402 - the pods' own code

LOADED = ROOT / "workloads" / "image" / "loaded_nccl.py"
VERSION_LINE = re.compile(r"NCCL INFO NCCL version (\d+\.\d+\.\d+)")
"""NVIDIA/nccl src/init.cc ``showVersion``: ``NCCL version %s`` at communicator init (NCCL_DEBUG=INFO)."""


def python(code_or_path: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *code_or_path], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


def check_nccl() -> bool:
    loaded = python([str(LOADED)])
    probe = python(["-c", NCCL_PROBE], {"NCCL_DEBUG": "INFO", "PREFLIGHT_PORT": "29555"})
    line = VERSION_LINE.search(probe.stdout + probe.stderr)
    torch_says = python(["-c", "import torch; print(torch.cuda.nccl.version())"])
    print(f"loaded_nccl.py: {loaded.stdout.strip() or loaded.stderr.strip()}")
    print(f"NCCL's INFO line: {line.group(1) if line else 'none (exit %d)' % probe.returncode}")
    print(f"torch.cuda.nccl.version(): {torch_says.stdout.strip() or torch_says.stderr.strip()}")
    return bool(line) and loaded.returncode == 0 and loaded.stdout.strip() == line.group(1)


def gpus() -> int:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    return len(re.findall(r"^GPU \d+:", out, re.M))


def check_deepep(tree: Path = Path("/opt/deepep")) -> bool:
    done = subprocess.run([sys.executable, "tests/elastic/test_ep.py", "--num-processes", str(gpus())],
                          cwd=tree, timeout=1800)
    return done.returncode == 0


def launch_argv(engine: dict, port: int) -> list[str]:
    """SGLang's server with the engine's flags and Miles' sizes (``preflight.sglang_server_args``)."""
    tokens = sglang_tokens(engine["argv"])
    return [sys.executable, "-m", "sglang.launch_server", "--model-path", engine["model_path"],
            "--load-format", "dummy", "--skip-tokenizer-init", "--tp-size", str(engine["gpus_per_engine"]),
            "--port", str(port), *tokens]


def serve_once(engine: dict, port: int = 30000, wait_s: int = 1200) -> bool:
    server = subprocess.Popen(launch_argv(engine, port), env={**os.environ, **engine["env"]})
    try:
        deadline = time.time() + wait_s
        while time.time() < deadline and server.poll() is None:
            try:
                body = json.dumps({"input_ids": [1, 2, 3, 4], "sampling_params": {"max_new_tokens": 8}}).encode()
                req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", body,
                                             {"Content-Type": "application/json"})
                answer = json.loads(urllib.request.urlopen(req, timeout=60).read())
                print(f"{engine['name']}: answered {len(answer.get('output_ids', []))} tokens")
                return True
            except OSError:
                time.sleep(10)
        print(f"{engine['name']}: no answer (server exit {server.poll()})")
        return False
    finally:
        server.terminate()
        server.wait(timeout=120)


def fitting(engines: list[dict], here: int) -> tuple[list[dict], list[str]]:
    """The engines one host of ``here`` GPUs can start, and one line for each left out, saying why."""
    fit, left = [], []
    for e in engines:
        need, per_node = e["gpus_per_engine"], e["gpus_per_node"]
        if need > per_node:
            left.append(f"{e['name']}: {need} GPUs over {-(-need // per_node)} nodes of {per_node} (an engine across "
                        f"nodes needs as many hosts)")
        elif need > here:
            left.append(f"{e['name']}: {need} GPUs, this host has {here}")
        else:
            fit.append(e)
    return fit, left


ONLY_VARIANTS = 3
"""``engines``' exit code when every engine that ran answered but none of them was shipped: only one-host
variants ran, which stand in for engines across nodes and say little about them."""


def check_engines(path: Path, here: int | None = None, serve=serve_once) -> int:
    """The exit code: 0 when every engine that fits answered and at least one shipped engine (one without
    ``variant_of``) was among them; 1 when none fits or one that fits did not answer; ``ONLY_VARIANTS`` when
    all answered but all were one-host variants. Shipped engines and variants are counted apart."""
    here = gpus() if here is None else here
    engines = json.loads(path.read_text())
    fit, left = fitting(engines, here)
    for line in left:
        print(f"not run: {line}")
    shipped = [e for e in fit if "variant_of" not in e]
    variants = [e for e in fit if "variant_of" in e]
    print(f"{len(shipped)} of {sum('variant_of' not in e for e in engines)} shipped engines and {len(variants)} of "
          f"{sum('variant_of' in e for e in engines)} one-host variants fit {here} GPUs")
    if not fit:
        print("no engine ran: nothing was checked")
        return 1
    answered = {id(e) for e in fit if serve(e)}
    print(f"{sum(id(e) in answered for e in shipped)} of {len(shipped)} shipped engines answered, "
          f"{sum(id(e) in answered for e in variants)} of {len(variants)} one-host variants answered")
    for v in variants:
        print(f"variant, not the shipped engine: {v['name']} stands in for {v['variant_of']}, not run")
    if len(answered) < len(fit):
        return 1
    if not shipped:
        print("no shipped engine ran: only one-host variants, which do not check the engines they vary")
        return ONLY_VARIANTS
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="check", required=True)
    sub.add_parser("nccl")
    sub.add_parser("deepep").add_argument("--tree", type=Path, default=Path("/opt/deepep"))
    sub.add_parser("engines").add_argument("file", type=Path)
    args = p.parse_args()
    if args.check == "engines":
        code = check_engines(args.file)
        print("ok" if code == 0 else "FAILED" if code == 1 else "NO SHIPPED ENGINE")
        return code
    ok = {"nccl": check_nccl, "deepep": lambda: check_deepep(args.tree)}[args.check]()
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
