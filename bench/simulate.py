"""A simulator of collected artifacts, for the tests and the shipped example; never a measurement.

``simulate(experiment, truth, root)`` writes what ``run`` collects, for every attempt of the
experiment: a driver log shaped like a Miles driver log as ``ray job logs`` returns it (Ray's job
line with the job id, Ray's coloured actor prefix, Miles' logging prefix, both ``perf`` lines, the
``rollout`` and ``step`` lines of each step with the pinned Miles' keys, see ``bench.logparse``;
each engine's ``server_args=`` line and NCCL's ``Using network`` lines, see ``bench.evidence``), with
one truncated line where the log ends; the RayJob(s) with the argv the arm renders on the experiment's stack
in ``MILES_ARGV`` (the RayJob ``bench run`` submits), the job id and KubeRay status times; the Node objects
with EKS labels and GPU capacity; GetMetricData results; and, for a fault arm, the faults with FIS' action
time and target, the kubelet's ``Killing`` and KubeRay's Event (for a pod fault before the run reacts, as a
grace-0 delete lets KubeRay do; ``POD_GONE_KUBERAY_S``), Miles' health-check and recovery lines and the
resume they cause. Figures follow ``truth`` (rollout tokens/s of the pool as its long-run throughput, step
noise, hostile on request: stalls, heavy tails, autocorrelation, a slow node, late starts, ``bench.noise``;
drift per repeat and along the schedule, response length, step overheads), so a report on the directory must
find them; an arm ``truth`` does not name runs at ``truth.default``. ``simulated.json`` marks the directory
as simulated.

    python -m bench.simulate experiments/example-ab.yaml examples/bench-report   # the shipped example
    python -m bench.simulate experiments/seed-ab.yaml /tmp/seed-ab                 # any experiment
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import zlib
from dataclasses import dataclass
from functools import cache
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from stackconfig.labels import POOL_LABEL, ROLE_LABEL
from workloads.schema.labels import RUN_LABEL
from workloads.pod.miles_launcher import ARGV_ENV, JOB_LINE

from .argv import flag, rayjob_argv
from .artifacts import CAPACITY_TYPE_LABEL, EXPERIMENT_FILE, GPU_RESOURCE, INSTANCE_TYPE_LABEL
from .checks import EKS_NETWORK_LAYERS, ZONE_LABEL
from .cloudwatch import EFA_RX, EFA_TX, GPU_UTIL, RDMA_READ, RDMA_WRITE, queries
from .experiment import Attempt, Experiment, arm_run, load_experiment, schedule
from .noise import attempt_noise
from .report import SIMULATED_FILE

GPUS_PER_NODE = 8
START = datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc)


@dataclass(frozen=True)
class ArmTruth:
    tokens_per_s: float
    """Rollout throughput of the whole rollout pool, tokens/s: its long-run Σtokens/Σtime on a normal node
    (``bench.noise.calibration``), whatever its noise."""
    noise: float = 0.03
    """Relative standard deviation from step to step (the scale of ``tail_df``'s t)."""
    repeat_drift: float = 0.01
    """Relative standard deviation of a whole repeat (the cluster's drift)."""
    tail_df: float | None = None
    """Heavy-tailed steps: Student's t with this many degrees of freedom instead of the normal."""
    stall_share: float = 0.0
    """Share of steps that stall, their rate divided by a factor in ``stall_slowdown``."""
    stall_slowdown: tuple[float, float] = (2.0, 3.0)
    slow_node_share: float = 0.0
    """Share of attempts that land on the slow node (``Truth.slow_node``)."""
    response_len: float = 3000.0
    response_len_cv: float = 0.03
    train_s: float = 60.0
    gpu_util: float = 70.0
    efa_gbps: float = 100.0
    reward: float = 0.45
    kl: float = 0.002


@dataclass(frozen=True)
class Truth:
    arms: dict[str, ArmTruth]
    instance_type: str = "p5en.48xlarge"
    capacity_type: str = "CAPACITY_BLOCK"
    startup_s: float = 600.0
    seed: int = 7
    note: str = "bench/simulate.py from its configured figures"
    default: ArmTruth = ArmTruth(tokens_per_s=50000)
    """The truth of an arm ``arms`` does not name."""
    drift_per_attempt: float = 0.0
    """Relative change of every arm's throughput from one attempt of the schedule to the next (a linear
    drift of the cluster)."""
    autocorrelation: float = 0.0
    """AR(1) coefficient of the step noise within an attempt."""
    slow_node: float = 0.85
    """Speed of the slow node, as a share of the others'."""
    late_start: int = 0
    """Each attempt's log starts at a step drawn from 0..late_start (as a resumed attempt's would): unequal
    step counts."""

    def arm(self, name: str) -> ArmTruth:
        return self.arms.get(name, self.default)


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond // 1000:03d}"


def _line(t: datetime, actor: str, pid: int, process: str, where: str, message: str) -> str:
    """One actor line as the Ray driver prints it (ray/_private/worker.py:2350-2353) around Miles'
    logging format (miles/utils/logging_utils.py:35)."""
    return f"\x1b[36m({actor} pid={pid}, ip=10.0.3.17)\x1b[0m [{_stamp(t)} {process}] {where} - {message}"


def rollout_figures(tput: float, length: float, samples: int, gpus: int) -> tuple[float, float]:
    """(``perf/rollout_time``, ``perf/tokens_per_gpu_per_sec``) of a step of ``samples`` responses of mean
    ``length`` generated at ``tput`` tokens/s by ``gpus`` GPUs."""
    rollout_time = samples * length / tput
    return rollout_time, samples * length / rollout_time / gpus


def _rollout_metrics(rng: random.Random, tput: float, length: float, samples: int, gpus: int) -> dict:
    tokens = samples * length
    rollout_time, per_gpu = rollout_figures(tput, length, samples, gpus)
    longest = min(8192.0, length * 2.6)
    return {"rollout/response_len/mean": length, "rollout/response_len/median": length * 0.92,
            "rollout/response_len/max": longest, "rollout/response_len/min": length * 0.08,
            "rollout/zero_std/count_0.0": float(rng.randint(0, 6)), "rollout/repetition_frac": 0.0,
            "rollout/truncated_ratio": round(rng.uniform(0.0, 0.04), 4), "perf/rollout_time": rollout_time,
            "perf/tokens_per_gpu_per_sec": per_gpu,
            "perf/longest_sample_tokens_per_sec": longest / rollout_time,
            "perf/effective_tokens_per_gpu_per_sec": per_gpu,
            "perf/longest_effective_sample_tokens_per_sec": longest / rollout_time}


def _train_metrics(rng: random.Random, truth: ArmTruth, rollout_time: float) -> dict:
    train = truth.train_s * rng.uniform(0.97, 1.03)
    return {"perf/train_wait_time": rollout_time, "perf/data_preprocess_time": 0.4, "perf/train_time": train,
            "perf/actor_train_time": train * 0.8, "perf/update_weights_time": train * 0.15,
            "perf/actor_train_tflops": 180.0, "perf/actor_train_tok_per_s": 9000.0,
            "perf/step_time": rollout_time + train, "perf/wait_time_ratio": rollout_time / (rollout_time + train)}


SLOW_NODE = "ip-10-0-3-99.ec2.internal"
"""The rollout node of an attempt that landed on the slow node (``ArmTruth.slow_node_share``)."""


def _nodes(attempt: Attempt, truth: Truth, slow: bool = False) -> list[dict]:
    out = []
    for pool, count in sorted(attempt.run.nodes.items()):
        for i in range(count):
            name = f"ip-10-0-{3 if pool == 'rollout' else 2}-{10 + i}.ec2.internal"
            if slow and pool == "rollout" and i == 0:
                name = SLOW_NODE
            out.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
                ROLE_LABEL: pool, POOL_LABEL: pool, INSTANCE_TYPE_LABEL: truth.instance_type,
                CAPACITY_TYPE_LABEL: truth.capacity_type, ZONE_LABEL: "us-east-1a",
                **dict(zip(EKS_NETWORK_LAYERS, ("nn-sim-1", "nn-sim-2", f"nn-sim-3-{pool}")))}},
                "spec": {"providerID": f"aws:///us-east-1a/i-0{zlib.crc32(f'{attempt.folder}/{name}'.encode()):016x}"},
                "status": {"capacity": {GPU_RESOURCE: str(GPUS_PER_NODE)}}})
    return out


def resolved_runner(a2a: str, runner: str) -> str:
    """The expert GEMM SGLang runs for the a2a backend and runner asked: an explicit runner as asked; under
    ``auto`` DeepGEMM with a DeepEP a2a, Triton otherwise (sglang 0.5.19 layers/quantization/fp8.py:1111-1133,
    as ``workloads.derive.moe_backend.choose`` cites it)."""
    if runner != "auto":
        return runner
    return "deep_gemm" if a2a.startswith("deepep") else "triton"


@cache
def _stack(name: str):
    """The repository's stack file ``name``, read once per process (the simulator never edits one)."""
    from workloads.checks import gate
    return gate.read(name)


_ARGVS: dict[tuple[str, str], list[str]] = {}


def _argv(exp: Experiment, arm: str) -> list[str]:
    """The entry point and flags the arm's RayJob carries, as ``bench run`` submits it on the experiment's
    stack (``workloads.deploy.submit.run_objects``; the RayJob ``bench.arms.render_arm`` reads)."""
    run = arm_run(exp, arm)
    key = (exp.stack, run.model_dump_json())
    if key not in _ARGVS:  # rendering costs more than a simulated attempt; bench.coverage renders the same arms
        from workloads.deploy.submit import run_objects
        _ARGVS[key] = rayjob_argv(run_objects(_stack(exp.stack), run).rayjob)
    return _ARGVS[key]


def _job_id(attempt: Attempt, n: int) -> str:
    return f"raysubmit_{zlib.crc32(f'{attempt.run.name}-{n}'.encode()):08x}"


def _saved(t: datetime, iteration: int) -> str:
    """Megatron's line once a save is complete (megatron/training/checkpointing.py:742-745)."""
    return (f"\x1b[36m(MegatronTrainRayActor pid=2405, ip=10.0.3.17)\x1b[0m   [{t.strftime('%Y-%m-%d %H:%M:%S.%f')}] "
            f"successfully saved checkpoint from iteration {iteration:7d} to /mnt/fsx/checkpoints [ t 1/1, p 1/1 ]")


def _cluster(rayjob: str) -> str:
    """The name of the RayCluster KubeRay makes for ``rayjob`` (``<rayjob>-<5 random>`` at v1.7.0,
    ``utils.GenerateRayClusterName``; a fixed tail here)."""
    return f"{rayjob}-rcsim"


def _rayjob(attempt: Attempt, argv: list[str], n: int, start: datetime, end: datetime, failed: bool) -> dict:
    name = f"{attempt.run.name}-{n}"
    env = yaml.safe_dump({"env_vars": {ARGV_ENV: json.dumps(argv)}})
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {
        "name": name, "namespace": f"team-{attempt.run.team}", "labels": {RUN_LABEL: attempt.run.name}},
        "spec": {"entrypoint": "python3 /opt/moe-rl/miles_launcher.py", "runtimeEnvYAML": env},
        "status": {"jobId": _job_id(attempt, n), "jobDeploymentStatus": "Failed" if failed else "Complete",
                   "jobStatus": "FAILED" if failed else "SUCCEEDED", "startTime": start.isoformat(),
                   "endTime": end.isoformat(), "rayClusterName": _cluster(name),
                   "rayJobInfo": {"startTime": (start + timedelta(minutes=5)).isoformat(), "endTime": end.isoformat()}}}


def _cloudwatch(nodes: list[dict], arm: ArmTruth, start: datetime, end: datetime, rng: random.Random) -> dict:
    pairs = [(n["metadata"]["name"], n["spec"]["providerID"].rsplit("/", 1)[-1]) for n in nodes]
    stamps = [start + timedelta(minutes=m) for m in range(int((end - start).total_seconds() // 60))]
    results = []
    for q in queries("rl-p5en-shared", pairs):
        metric = q["MetricStat"]["Metric"]["MetricName"]
        half = arm.efa_gbps / 2 * 1e9 / 8
        mean = {GPU_UTIL: arm.gpu_util, EFA_RX: half, EFA_TX: half, RDMA_READ: half * 0.1, RDMA_WRITE: half * 0.8}[metric]
        results.append({"Id": q["Id"], "Label": q["Label"], "Timestamps": [t.isoformat() for t in stamps],
                        "Values": [mean * rng.uniform(0.95, 1.05) for _ in stamps], "StatusCode": "Complete"})
    return {"namespace": "ContainerInsights", "cluster": "rl-p5en-shared", "periodSeconds": 60,
            "start": start.isoformat(), "end": end.isoformat(), "MetricDataResults": results}


def _job_header(attempt: Attempt, argv: list[str], n: int, t: datetime) -> list[str]:
    """What a job's log shows before its first step: Ray's job line (job_supervisor.py), each engine's
    resolved server args for what ``argv`` asks (sglang engine.py:265; ``resolved_runner``) and NCCL's
    network choice (NCCL_DEBUG=INFO, init.cc)."""
    run = attempt.run
    a2a, runner = flag(argv, "--sglang-moe-a2a-backend") or "none", flag(argv, "--sglang-moe-runner-backend") or "auto"
    per_engine = int(flag(argv, "--rollout-num-gpus-per-engine") or GPUS_PER_NODE)
    engines = max(1, int(flag(argv, "--rollout-num-gpus") or per_engine) // per_engine)
    modes = "".join(f", '{k}': '{v}'" for k, v in (("deepep_mode", flag(argv, "--sglang-deepep-mode")),
                                                  ("deepep_v2_mode", flag(argv, "--sglang-deepep-v2-mode"))) if v)
    network = "AWS Libfabric" if run.fabric == "efa" else "Socket"
    out = [JOB_LINE.format(job_id=_job_id(attempt, n))]  # the launcher's tee, as `bench run` collects it
    out += [_line(t, "SGLangEngine", 3000 + e, "sglang", "engine.py:265",
                  f"server_args={{'tp_size': {per_engine}, 'moe_a2a_backend': '{a2a}', 'moe_runner_backend': "
                  f"'{resolved_runner(a2a, runner)}'{modes}}}") for e in range(engines)]
    out += [f"ip-10-0-2-10:2405:2405 [0] NCCL INFO Using network {network}"]
    if a2a == "deepep_v2":
        out.append("ip-10-0-3-10:3000:3000 [0] NCCL INFO NET/OFI gin: Initializing")
    return out


def _attempt(exp: Experiment, attempt: Attempt, truth: Truth, start: datetime, rng: random.Random,
             folder: Path, slot: int = 0) -> datetime:
    arm = truth.arm(attempt.arm)
    run = attempt.run
    drawn = attempt_noise(truth, arm, slot)
    nodes = _nodes(attempt, truth, drawn.slow)
    gpus = attempt.run.nodes["rollout"] * GPUS_PER_NODE
    samples = run.grpo.rollout_batch_size * run.grpo.n_samples_per_prompt
    per_rollout = max(1, samples // run.grpo.global_batch_size)
    rate, noise = drawn.rate, drawn.steps
    faults = {f.at_step: f.spec for f in exp.arm(attempt.arm).faults}
    argv = _argv(exp, attempt.arm)
    lines = _job_header(attempt, argv, 1, start)
    t = start + timedelta(seconds=truth.startup_s)
    jobs, fault_records, events, job_start, step, slow = [], [], [], start, drawn.first, 0
    while step < exp.total_steps:
        tput = rate * noise.rate() * (0.6 if slow else 1.0)
        slow = max(0, slow - 1)
        r = _rollout_metrics(rng, tput, noise.response_len(), samples, gpus)
        t += timedelta(seconds=r["perf/rollout_time"])
        lines.append(_line(t, "RolloutManager", 2211, "rollout_manager", "metrics.py:89", f"perf {step}: {r}"))
        reward = {"rollout/raw_reward": min(1.0, max(0.0, rng.gauss(arm.reward, 0.03))),
                  "rollout/rewards": 0.0, "rollout/response_lengths": r["rollout/response_len/mean"]}
        lines.append(_line(t, "MegatronTrainRayActor", 2405, "train_cell0_rank0", "log_utils.py:123",
                           f"rollout {step}: {reward}"))
        lines += [_line(t, "MegatronTrainRayActor", 2405, "train_cell0_rank0", "log_utils.py:542",
                        f"step {step * per_rollout + i}: " + str({"train/ppo_kl": abs(rng.gauss(arm.kl, arm.kl / 4)),
                                                                  "train/loss": 0.1, "train/grad_norm": 0.5}))
                  for i in range(per_rollout)]
        tr = _train_metrics(rng, arm, r["perf/rollout_time"])
        t += timedelta(seconds=tr["perf/train_time"])
        lines.append(_line(t, "MegatronTrainRayActor", 2405, "train_cell0_rank0", "train_metric_utils.py:56",
                           f"perf {step}: {tr}"))
        if (step + 1) % run.save_interval == 0:  # the signals bench.recovery reads (its docstring cites them)
            lines.append(_saved(t, step))
        kind = faults.pop(step, None)
        if kind is None:
            step += 1
            continue
        injected, action, kill, platform, detected = _fault_times(t, kind)
        hit = f"{run.name}-{len(jobs) + 1}-{kind.group}-0"
        fault_records.append({"kind": kind.name, "step": step, "loggedStep": step, "target": "simulated",
                              "rayjob": f"{run.name}-{len(jobs) + 1}", "injectedAt": injected.isoformat(),
                              "actionStartedAt": action.isoformat(), "hit": [hit],
                              **({"tag": "simulated"} if kind.removes_node else {})})
        if not kind.removes_node:
            events.append(_event("Killing", "Pod", hit, kill))
        events.append(_event("CreatedWorkerPod", "RayCluster", _cluster(f"{run.name}-{len(jobs) + 1}"), platform))
        if kind.simulated.recovery == "in-place":  # the engine restarts (--use-fault-tolerance)
            lines.append(_line(detected, "RolloutManager", 2211, "rollout_manager", "health_monitor.py:154",
                               "Health check failed for rollout engine 0 (ray timeout or error). Killing actor."))
            t = detected + timedelta(seconds=120)
            lines.append(_line(t, "RolloutManager", 2211, "rollout_manager", "server_group.py:209",
                               "Recovered 1 dead rollout engines (worker_type=regular)"))
            step, slow = step + 1, 2
            continue
        # resubmit: the job fails, the next attempt resumes at the last checkpoint boundary
        cut = str({"perf/rollout_time": 1.0, "perf/tokens_per_gpu_per_sec": 2.0})[:25]
        lines.append(_line(kill, "RolloutManager", 2211, "rollout_manager", "metrics.py:89", f"perf {step + 1}: {cut}"))
        jobs.append(_rayjob(attempt, argv, len(jobs) + 1, job_start, detected, failed=True))
        job_start = detected + timedelta(seconds=30)
        lines += _job_header(attempt, argv, len(jobs) + 1, job_start)
        t = job_start + timedelta(seconds=truth.startup_s)
        step, slow = (step + 1) // run.save_interval * run.save_interval, 2
        fault_records[-1]["resumedAs"] = f"{run.name}-{len(jobs) + 1}"
        lines.append(f"\x1b[36m(MegatronTrainRayActor pid=2405, ip=10.0.3.17)\x1b[0m  successfully loaded checkpoint "
                     f"from /mnt/fsx/checkpoints/{run.name} [ t 1/1, p 1/1 ] at iteration {step - 1}")
    jobs.append(_rayjob(attempt, argv, len(jobs) + 1, job_start, t + timedelta(seconds=30), failed=False))
    # the log of a stopped job often ends mid-line
    lines.append(_line(t, "RolloutManager", 2211, "rollout_manager", "metrics.py:53", "eval 99: {'eval/aime': 0.4")[:60])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "driver.log").write_text("\n".join(lines) + "\n")
    (folder / "rayjob.json").write_text(json.dumps(jobs[0] if len(jobs) == 1 else
                                                   {"apiVersion": "ray.io/v1", "kind": "RayJobList", "items": jobs}, indent=1))
    (folder / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": nodes}, indent=1))
    (folder / "cloudwatch.json").write_text(json.dumps(_cloudwatch(nodes, arm, start, t, rng)))
    if fault_records:
        (folder / "faults.json").write_text(json.dumps(fault_records, indent=1))
        (folder / "events.json").write_text(json.dumps({"apiVersion": "v1", "kind": "EventList", "items": events}))
    return t + timedelta(seconds=120)


FIS_START_S, POD_KILL_S = 10.0, 15.0
"""As the simulator plays a fault: FIS starts its action this long after the runner's call, and its pod
kills the target this long after that (a node's terminate acts at once)."""
POD_GONE_KUBERAY_S = 0.5
"""A pod fault: KubeRay's first Event (``CreatedWorkerPod``) this long after the kill, before the run's first
reaction (the kind's ``detectedAfterSeconds``): the grace-0 delete removes the Pod object at once, and
KubeRay's Pod watch makes the worker again (ray-project/kuberay v1.7.0
``ray-operator/controllers/ray/raycluster_controller.go:1183`` ``diff > 0``, ``:1688``) while Miles waits
for its next health check. Stated, not measured."""
NODE_GONE_KUBERAY_S = 90.0
"""A node fault: KubeRay's first Event this long after the kill, after the run's (``terminate-gpu-node``'s is
simulated at 45 s): the pod stays bound to the lost node (tolerating it for ``workloads.render.ray.NODE_DOWN_SECONDS``) until its Node object goes with the
instance and the pod is collected; only then does KubeRay make it again. An allowance, not a measurement."""


def _fault_times(t: datetime, kind) -> tuple[datetime, datetime, datetime, datetime, datetime]:
    """(the runner's call, FIS' action start, the kill, KubeRay's first Event, the run's first reaction) of a
    fault after the step at ``t``."""
    injected = t + timedelta(seconds=5)
    action = injected + timedelta(seconds=FIS_START_S)
    kill = action + timedelta(seconds=0 if kind.removes_node else POD_KILL_S)
    platform = kill + timedelta(seconds=NODE_GONE_KUBERAY_S if kind.removes_node else POD_GONE_KUBERAY_S)
    return injected, action, kill, platform, kill + timedelta(seconds=kind.simulated.detected_after_seconds)


def _event(reason: str, kind: str, name: str, at: datetime) -> dict:
    """A Kubernetes Event as ``bench run`` records it (``sanitize_for_serialization``: camelCase)."""
    return {"metadata": {"name": f"{name}.{reason.lower()}"}, "reason": reason,
            "involvedObject": {"kind": kind, "name": name}, "eventTime": at.isoformat()}


def simulate(experiment: Path, truth: Truth, root: Path) -> Experiment:
    exp = load_experiment(experiment)
    root.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(experiment, root / EXPERIMENT_FILE)
    (root / SIMULATED_FILE).write_text(json.dumps({"note": truth.note}) + "\n")
    rng = random.Random(truth.seed)
    t = START
    for slot, attempt in enumerate(schedule(exp)):
        t = _attempt(exp, attempt, truth, t, rng, root / attempt.folder, slot)
    return exp


EXAMPLE_TRUTH = Truth(arms={
    "nccl": ArmTruth(tokens_per_s=52000, response_len=3100, gpu_util=61, efa_gbps=38),
    "deepep-v1": ArmTruth(tokens_per_s=57200, response_len=3150, gpu_util=66, efa_gbps=45),
    "deepep-v1-faults": ArmTruth(tokens_per_s=57200, response_len=3150, gpu_util=64, efa_gbps=44)},
    capacity_type="ON_DEMAND", note="bench/simulate.py (EXAMPLE_TRUTH: nccl 52,000 tokens/s, deepep-v1 57,200 tokens/s, 3% step noise); "
         "an illustration of the report, not a measurement")


if __name__ == "__main__":  # pragma: no cover
    simulate(Path(sys.argv[1]), EXAMPLE_TRUTH, Path(sys.argv[2]))
