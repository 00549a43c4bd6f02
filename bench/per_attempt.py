"""The figures of one checked attempt (a row of report.md's per-repeat tables).

Tokens are generated response tokens: a step's ``perf/tokens_per_gpu_per_sec`` x ``--rollout-num-gpus``
x ``perf/rollout_time``, which is the sum of the step's sample response lengths (radixark/miles@49cac7b5
``miles/ray/rollout/metrics.py:142-149``); prompt tokens are not counted.

- rollout tokens/s, the repeat's figure: Σtokens/Σ``perf/rollout_time`` over its measured steps (the
  whole rollout pool's throughput); per step, the pool's rate (``perf/tokens_per_gpu_per_sec`` x
  ``--rollout-num-gpus``), whose median stays as a descriptive column (a median of rates is not a
  throughput: an arm whose steps are fast but some stall has a high median and a low throughput);
- the rest of the step: medians of ``perf/step_time``, ``perf/train_wait_time`` (waiting for the
  rollout), ``perf/train_time`` and ``perf/update_weights_time`` (the weight sync to the engines)
  (Miles ``miles/utils/train_metric_utils.py:50-56``);
- end to end, over the measured window (from the first measured step's rollout line to the last's):
  tokens and samples trained per wall-clock second, the steps after the first divided by the time
  between the two lines (the window holds exactly their rollouts and trainings);
- quality: mean ``rollout/raw_reward`` (Miles ``log_utils.py:123``), mean ``train/ppo_kl`` of the train
  steps of measured rollouts (``step n`` of rollout ``n // num_steps_per_rollout``, where
  num_steps_per_rollout = rolloutBatchSize x nSamplesPerPrompt / globalBatchSize, Miles
  ``miles/utils/arguments.py``), mean ``rollout/truncated_ratio`` (``metrics.py:105``);
- utilisation per role over the measured window only (Container Insights, ``cloudwatch``): GPU %,
  EFA rx + tx, RDMA read and write, Gbit/s per node;
- time: job completion time from KubeRay's ``status.startTime`` to ``status.endTime`` (gang wait and
  start-up included), and of it the start-up before the Ray job began (``Collected.startup_seconds``);
- money: the attempt's nodes x its RayJob time (gang wait and start-up included: the nodes are held)
  x each node's price (``cost.Prices``) per whole-attempt token, and the steady-state figure: the
  nodes' price per second / end-to-end tokens per second (no gang wait in it).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from statistics import fmean, median

from .artifacts import Collected
from .checks import ROLLOUT_TIME, TOKENS
from .cloudwatch import EFA_RX, EFA_TX, GPU_UTIL, RDMA_READ, RDMA_WRITE
from .cost import Prices
from .evidence import Evidence, mode
from .experiment import Experiment

PARTS = {"step": "perf/step_time", "train_wait": "perf/train_wait_time", "train": "perf/train_time",
         "update_weights": "perf/update_weights_time"}
QUALITY = {"mean_reward": "rollout/raw_reward", "truncated_ratio": "rollout/truncated_ratio",
           "mean_response_len": "rollout/response_len/mean"}
KL = "train/ppo_kl"


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def _mean(xs: list[float]) -> float | None:
    return fmean(xs) if xs else None


def step_tokens_per_s(c: Collected, warmup: int) -> list[float]:
    """Per measured step, the rollout pool's rate (``perf/tokens_per_gpu_per_sec`` x ``--rollout-num-gpus``)."""
    gpus = c.rollout_gpus()
    return [s.metrics[TOKENS] * gpus for s in c.measured(warmup)]


def step_tokens(gpus: int, step) -> float:
    return step.metrics.get(TOKENS, 0.0) * gpus * step.metrics.get(ROLLOUT_TIME, 0.0)


def throughput(c: Collected, warmup: int) -> tuple[float, float]:
    """(Σtokens, Σ``perf/rollout_time``) over the measured steps: their quotient is the rollout throughput."""
    gpus, steps = c.rollout_gpus(), c.measured(warmup)
    return sum(step_tokens(gpus, s) for s in steps), sum(s.metrics.get(ROLLOUT_TIME, 0.0) for s in steps)


def attempt_tokens(c: Collected, gpus: int) -> float:
    """Tokens generated in the attempt (every first occurrence of a step, warm-up included)."""
    return sum(step_tokens(gpus, s) for s in c.log.first().values())


def window(c: Collected, warmup: int) -> tuple[datetime, datetime] | None:
    """From the start of the first measured rollout to the last measured step's rollout line."""
    steps = [s for s in c.measured(warmup) if s.at is not None]
    if not steps:
        return None
    return steps[0].at - timedelta(seconds=steps[0].metrics.get(ROLLOUT_TIME, 0.0)), steps[-1].at


def end_to_end(exp: Experiment, c: Collected, gpus: int) -> dict | None:
    steps = [s for s in c.measured(exp.warmup_steps) if s.at is not None]
    if len(steps) < 2 or steps[-1].at <= steps[0].at:
        return None
    seconds = (steps[-1].at - steps[0].at).total_seconds()
    grpo = c.attempt.run.grpo
    samples = (len(steps) - 1) * grpo.rollout_batch_size * grpo.n_samples_per_prompt
    return {"tokens_per_s": _r(sum(step_tokens(gpus, s) for s in steps[1:]) / seconds, 2),
            "samples_per_s": _r(samples / seconds), "window_s": round(seconds, 1)}


def _kl(exp: Experiment, c: Collected) -> float | None:
    grpo = c.attempt.run.grpo
    per = max(1, grpo.rollout_batch_size * grpo.n_samples_per_prompt // grpo.global_batch_size)
    ids = {s.rollout_id for s in c.measured(exp.warmup_steps)}
    return _mean([m[KL] for n, m in c.log.train if KL in m and n // per in ids])


def utilisation(c: Collected, span: tuple[datetime, datetime] | None) -> dict | None:
    """Per role: mean GPU % and per-node Gbit/s (EFA rx + tx, RDMA read, RDMA write) inside ``span``."""
    if c.cloudwatch is None or span is None:
        return None
    role = {n.name: n.role for n in c.nodes}
    series: dict[str, dict[str, dict[str, list[float]]]] = {}
    for r in c.cloudwatch.get("MetricDataResults", []):
        metric, _, node = r.get("Label", "").partition(" ")
        vals = [v for t, v in zip(r.get("Timestamps", []), r.get("Values", []))
                if span[0] <= datetime.fromisoformat(t.replace("Z", "+00:00")) <= span[1]]
        if vals:
            series.setdefault(role.get(node, "?"), {}).setdefault(metric, {}).setdefault(node, []).extend(vals)
    out = {}
    for rl, metrics in sorted(series.items()):
        def per_node(*names: str) -> float | None:
            nodes = set().union(*(metrics.get(m, {}) for m in names))
            got = [sum(fmean(metrics[m][n]) for m in names if n in metrics.get(m, {})) * 8 / 1e9 for n in nodes]
            return _r(_mean(got), 3)
        gpu = [fmean(v) for v in metrics.get(GPU_UTIL, {}).values()]
        out[rl] = {"gpu_util": _r(_mean(gpu), 2), "efa_gbps": per_node(EFA_RX, EFA_TX),
                   "rdma_read_gbps": per_node(RDMA_READ), "rdma_write_gbps": per_node(RDMA_WRITE)}
    return out


def costs(c: Collected, prices: Prices, zones: dict[str, str]) -> tuple[float | None, float | None, list[str]]:
    """(USD of the whole attempt, USD per second of its nodes, price sources)."""
    rate, sources = 0.0, set()
    for node in c.nodes:
        price, source = prices.node(node, zones.get(node.name, ""))
        sources.add(source)
        if price is None:
            return None, None, sorted(sources)
        rate += price / 3600
    return rate * c.seconds, rate, sorted(sources)


def attempt_figures(exp: Experiment, c: Collected, prices: Prices, nodes: dict, ev: Evidence) -> dict:
    steps, gpus = c.measured(exp.warmup_steps), c.rollout_gpus()
    rates = step_tokens_per_s(c, exp.warmup_steps)
    generated, rollout_s = throughput(c, exp.warmup_steps)
    e2e = end_to_end(exp, c, gpus)
    usd, usd_per_s, sources = costs(c, prices, nodes["zones"])
    tokens = attempt_tokens(c, gpus)
    parts = {k: _r(median(v), 3) if (v := [s.metrics[m] for s in steps if m in s.metrics]) else None
             for k, m in PARTS.items()}
    quality = {k: _r(_mean([s.metrics[m] for s in steps if m in s.metrics])) for k, m in QUALITY.items()}
    quality["kl"] = _r(_kl(exp, c), 6)
    return {
        "attempt": c.attempt.folder, "block": c.attempt.repeat, "mode": mode(c), "rollout_gpus": gpus,
        "first_step": min(s.rollout_id for s in steps), "measured_steps": len(steps),
        "rollout_tokens_per_s": round(generated / rollout_s, 2), "step_rate_median": round(median(rates), 2),
        "end_to_end": e2e, "step_parts_s": parts, "quality": quality,
        "jct_s": round(c.seconds, 1), "startup_s": None if c.startup_seconds is None else round(c.startup_seconds, 1),
        "node_hours": round(len(c.nodes) * c.seconds / 3600, 3),
        "gpu_hours": round(sum(n.gpus for n in c.nodes) * c.seconds / 3600, 3),
        "cost_usd": _r(usd, 2), "price_basis": sources, "tokens_generated": round(tokens),
        "usd_per_million_tokens": _r(usd / tokens * 1e6) if usd is not None and tokens else None,
        "steady_usd_per_million_tokens": _r(usd_per_s / e2e["tokens_per_s"] * 1e6)
        if usd_per_s is not None and e2e and e2e["tokens_per_s"] else None,
        "utilisation_measured_window": utilisation(c, window(c, exp.warmup_steps)),
        "nodes": nodes["nodes"], "network_node_layers": nodes["network_node_layers"], "evidence": ev.to_json(),
        "malformed_perf_lines": len(c.log.malformed), "lines_collapsed_by_ray_dedup": c.log.collapsed,
    }
