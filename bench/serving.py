"""The fixed-workload rollout figure: SGLang's own serving benchmark against a run's engines, so decode
latency (where DeepEP acts) is measured apart from the policy's drifting response lengths.

What runs (sglang 0.5.19 ``sglang/benchmark/serving.py``, reached as ``python -m sglang.bench_serving``,
``sglang/bench_serving.py``): ``--backend sglang`` (:2210) at ``--base-url`` (:2217) the run's router,
``--dataset-name random-ids`` (:2237-2246: random token ids, no dataset download) with
``--random-input-len``/``--random-output-len`` (:2321, :2327) and ``--random-range-ratio 1.0`` (:2333,
default 0.0: lengths drawn below the given ones), so every prompt has exactly those lengths; EOS is
ignored by default (``--disable-ignore-eos`` :2455 not given), so every answer is as long;
``--num-prompts`` (:2303), ``--max-concurrency`` (:2387), ``--seed`` (:2453), ``--tokenizer`` (:2298)
the run's model directory, ``--output-file`` (:2399) one JSON line per run (:1898-1903).

Where: in the attempt's head container, through the exec a team member may use (the run command's
``RunClient._exec``), started in the background so the exec's timeout does not bound it; the router is
the RolloutManager's, pinned to the head (Miles 49cac7b5 ``--pin-rollout-manager-to-head``,
``miles/utils/arguments.py:814``) on a fixed ``--sglang-router-port``
(``miles/backends/sglang_utils/arguments.py:19``; else a random port, ``ray/rollout/router_manager.py:29-33``)
at the head's address (``get_host_info``). Not a Job: a team creates no pods but its RayJobs' (the
budget and admission model rests on that, ``render.teams.SUBMITTER_RULES``).

The figures are read from that JSON line (``serving.py:1808-1848``): TTFT, TPOT, ITL and end-to-end
latency, mean, median, p90, p95, p99 in ms, and output tokens/s.
"""

from __future__ import annotations

import json
import shlex

from workloads.cli.runs_client import RunClient, _attempt, _flag, _word
from workloads.pod.miles_launcher import driver_log_path

from .experiment import ServingBench

METRICS = [f"{stat}_{name}_ms" for name in ("ttft", "tpot", "itl", "e2e_latency")
           for stat in ("mean", "median", "p90", "p95", "p99")]
THROUGHPUT = ("output_throughput", "request_throughput", "completed", "duration")
"""Keys of sglang 0.5.19's result line (``sglang/benchmark/serving.py:1808-1848``)."""


def argv(bench: ServingBench, tokenizer: str, output: str) -> list[str]:
    return ["python3", "-m", "sglang.bench_serving", "--backend", "sglang",
            "--base-url", f"http://$HEAD_IP:{bench.router_port}", "--dataset-name", "random-ids",
            "--random-input-len", str(bench.input_len), "--random-output-len", str(bench.output_len),
            "--random-range-ratio", "1.0", "--num-prompts", str(bench.num_prompts),
            "--max-concurrency", str(bench.max_concurrency), "--seed", str(bench.seed),
            "--tokenizer", tokenizer, "--output-file", output, "--disable-tqdm"]


def start_command(bench: ServingBench, tokenizer: str, output: str) -> list[str]:
    """The exec that starts it in the background in the head container (``HEAD_IP``: the pod's address,
    where the router listens)."""
    words = " ".join(shlex.quote(w) if not w.startswith("http://$HEAD_IP") else f'"{w}"'
                     for w in argv(bench, tokenizer, output))
    return ["sh", "-c", f'HEAD_IP="$(hostname -i | cut -d" " -f1)"; rm -f {shlex.quote(output)}; '
                        f'nohup {words} > {shlex.quote(output)}.out 2>&1 &']


def parse_result(text: str) -> dict:
    """The figures of the last result line of ``--output-file``; ValueError naming what is missing."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError("bench_serving wrote no result line")
    doc = json.loads(lines[-1])
    missing = [k for k in METRICS + list(THROUGHPUT) if k not in doc]
    if missing:
        raise ValueError(f"bench_serving result has no {', '.join(missing)}")
    return {k: doc[k] for k in METRICS + list(THROUGHPUT)} | {
        k: doc.get(k) for k in ("random_input_len", "random_output_len", "max_concurrency")}


class ServingRun:
    """One attempt's serving benchmark (``bench.serving``): started in the head once its step is logged,
    its result line read from the run's directory at later polls."""

    def __init__(self, bench, team: str, run: str):
        self.bench, self.team, self.run = bench, team, run
        self.output: str | None = None
        self.result: dict = {"error": f"not started: step {bench.at_step} was never logged"}

    def poll(self, api: RunClient, job: dict, steps: list, finished: bool) -> None:
        if "error" not in self.result:
            return
        head = api._head(self.team, self.run, job)
        if self.output is None and not finished and head and any(s.rollout_id >= self.bench.at_step for s in steps):
            self.output = str(driver_log_path(_word(job, "--marker"), _attempt(job)).with_name(
                f"bench-serving-{_attempt(job)}.jsonl"))
            code, _ = api._exec(self.team, head, start_command(self.bench, _flag(job, "--hf-checkpoint"), self.output))
            self.result = {"error": f"bench_serving did not start (exec exited {code})"} if code != 0 else \
                {"error": "started; no result line yet", "startedAtStep": max(s.rollout_id for s in steps)}
        elif self.output is not None and head:
            code, text = api._exec(self.team, head, ["cat", self.output])
            if code == 0 and text.strip():
                self.result = parse_result(text) | {"startedAtStep": self.result.get("startedAtStep")}
        if finished and "error" in self.result and self.output is not None:
            self.result["error"] = f"no result before the attempt ended (see {self.output}.out)"
