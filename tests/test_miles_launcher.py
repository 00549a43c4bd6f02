"""The Miles launcher: Miles' first N placement-group bundles are the training group's; the argv comes
from the environment; the run's lease is fresh exactly while Miles runs.

A stand-in for Miles' ``miles/ray/placement_group.py`` (written here, not Miles' code) keeps the
calling convention the launcher relies on at Miles 49cac7b5: the module-level names
``placement_group`` and ``sort_key`` are looked up when the group is made, ``sort_key`` takes
``(bundle index, node IP, GPU id)``, and the first ``actor GPUs`` of the sorted order train. Its
``placement_group`` places bundles the way Ray does with label selectors: a bundle selecting
``ray.io/node-group: trainer`` lands on a training node. The rollout nodes' IPs sort BEFORE the
training nodes', which is the case that put training actors on rollout nodes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from workloads.pod.miles_launcher import ARGV_ENV, SAVE_TRIGGER, layout

STAND_IN = '''
import json, os

calls = []
NODES = {"trainer": ["10.0.9.1", "10.0.9.2"], "rollout": ["10.0.1.1", "10.0.1.2", "10.0.1.3", "10.0.1.4"]}


def placement_group(bundles, strategy="PACK", bundle_label_selector=None):
    calls.append(bundle_label_selector)
    free = {group: [(ip, g) for ip in ips for g in range(2)] for group, ips in NODES.items()}
    anywhere = [slot for group in ("rollout", "trainer") for slot in free[group]]
    placed = []
    for i in range(len(bundles)):
        group = (bundle_label_selector or [{}] * len(bundles))[i].get("ray.io/node-group")
        slot = free[group].pop(0) if group else anywhere.pop(0)
        if not group:
            for slots in free.values():
                if slot in slots:
                    slots.remove(slot)
        placed.append(slot)
    return placed


def sort_key(x):
    index, ip, gpu = x
    return (list(map(int, ip.split("."))), gpu)


def first_training_nodes(actor_gpus, num_gpus):
    placed = placement_group([{"GPU": 1, "CPU": 1}] * num_gpus, strategy="PACK")
    order = sorted([(i, ip, gpu) for i, (ip, gpu) in enumerate(placed)], key=sort_key)
    return sorted({ip for _, ip, _ in order[:actor_gpus]}), calls
'''

ENTRY = '''
import json, sys
from miles.ray import placement_group as pgm
args = sys.argv[1:]
actor = int(args[args.index("--actor-num-nodes") + 1]) * int(args[args.index("--actor-num-gpus-per-node") + 1])
total = actor + int(args[args.index("--rollout-num-gpus") + 1]) + int(sys.argv[sys.argv.index("--extra") + 1])
nodes, calls = pgm.first_training_nodes(actor, total)
print(json.dumps({"nodes": nodes, "selectors": calls[-1]}))
'''


def _miles(tmp_path: Path) -> Path:
    pkg = tmp_path / "miles" / "miles" / "ray"
    pkg.mkdir(parents=True)
    for d in (pkg.parent, pkg):
        (d / "__init__.py").write_text("")
    (pkg / "placement_group.py").write_text(STAND_IN)
    entry = tmp_path / "miles" / "train.py"
    entry.write_text(ENTRY)
    return entry


def _run(entry: Path, *flags: str, launcher: bool = True) -> dict:
    cmd = [sys.executable, *([str(ROOT / "workloads" / "pod" / "miles_launcher.py")] if launcher else []), str(entry), *flags]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=entry.parent.parent)
    return json.loads(out.stdout)


FLAGS = ("--actor-num-nodes", "2", "--actor-num-gpus-per-node", "2", "--rollout-num-gpus", "8")


def test_without_the_launcher_miles_order_puts_training_on_rollout_nodes(tmp_path):
    got = _run(_miles(tmp_path), *FLAGS, "--extra", "0", launcher=False)
    assert got["nodes"] == ["10.0.1.1", "10.0.1.2"] and got["selectors"] is None


def test_with_the_launcher_the_first_bundles_are_the_training_nodes(tmp_path):
    got = _run(_miles(tmp_path), *FLAGS, "--extra", "0")
    assert got["nodes"] == ["10.0.9.1", "10.0.9.2"]
    assert got["selectors"] == [{"ray.io/node-group": "trainer"}] * 4 + [{"ray.io/node-group": "rollout"}] * 8


def test_another_bundle_count_is_passed_through(tmp_path):
    flags = ("--actor-num-nodes", "2", "--actor-num-gpus-per-node", "2", "--rollout-num-gpus", "6")
    got = _run(_miles(tmp_path), *flags, "--extra", "2")  # e.g. eval GPUs beside the rollout: not our layout
    assert got["selectors"] is None


def test_the_layout_comes_from_miles_own_flags():
    assert layout(["--actor-num-nodes", "16", "--actor-num-gpus-per-node", "8", "--rollout-num-gpus", "256",
                   "--lr", "1e-6"]) == (128, 256)
    assert layout(["--actor-num-nodes", "16"]) is None


def test_argv_from_the_environment_and_a_lease_held_while_miles_runs(tmp_path):
    entry = _miles(tmp_path)
    entry.write_text(ENTRY + f"""
import os
lease = {str(tmp_path / "ckpt" / "RUNNING")!r}
print(json.dumps({{"lease": os.path.exists(lease), "stale_request": os.path.exists(os.path.join(os.path.dirname(lease), "SAVE_NOW"))}}))
""")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / SAVE_TRIGGER).touch()  # left by an earlier attempt: not a request to this one
    env = {**__import__("os").environ, ARGV_ENV: json.dumps([str(entry), *FLAGS, "--extra", "0"])}
    out = subprocess.run([sys.executable, str(ROOT / "workloads" / "pod" / "miles_launcher.py"), "--marker",
                          str(tmp_path / "ckpt" / "RUNNING")], capture_output=True, text=True, check=True, env=env)
    placed, held = map(json.loads, out.stdout.split("\n")[:2])
    assert placed["nodes"] == ["10.0.9.1", "10.0.9.2"]
    assert held == {"lease": True, "stale_request": False}
    assert not (tmp_path / "ckpt" / "RUNNING").exists()  # released at exit


def test_a_stopped_job_releases_its_lease(tmp_path):
    entry = tmp_path / "sleep.py"
    entry.write_text("import time\nprint('up', flush=True)\ntime.sleep(60)\n")
    lease = tmp_path / "ckpt" / "RUNNING"
    proc = subprocess.Popen([sys.executable, str(ROOT / "workloads" / "pod" / "miles_launcher.py"), "--marker", str(lease),
                             str(entry)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up" and lease.exists()
    proc.terminate()  # Ray stops a job with SIGTERM
    assert proc.wait(timeout=10) == 128 + 15 and not lease.exists()


def test_the_lease_names_its_attempt_and_a_later_attempts_lease_is_left_alone(tmp_path):
    from workloads.pod.miles_launcher import Lease
    path = tmp_path / "RUNNING"
    with Lease(path, "3"):
        assert path.read_text() == "3"
    assert not path.exists()
    with Lease(path, "3"):
        path.write_text("4")  # attempt 4 started while 3 was still unwinding
    assert path.read_text() == "4"


def test_the_launchers_group_names_are_the_ray_groups_the_stack_renders():
    """The launcher runs in the image without this package, so it names the groups itself."""
    from test_workloads import variant

    from workloads.pod.miles_launcher import ROLLOUT_GROUP, TRAIN_GROUP
    from workloads.derive.model import derive
    m = derive(variant("p5en-prod", {}))
    assert [g.name for g in m.workers if g.gpus] == [TRAIN_GROUP, ROLLOUT_GROUP]
    assert [g.name for g in m.workers if g.ray_resources.get("gpu_node")] == [TRAIN_GROUP]  # where the driver runs


ECHO_ARGV = "import json, sys\nprint(json.dumps(sys.argv[1:]))\n"


def _argv_seen(tmp_path: Path, ckpt: Path) -> list[str]:
    """What the entry point is given when the launcher runs it with ``--load <ckpt>`` and its lease there."""
    entry = tmp_path / "train.py"
    entry.write_text(ECHO_ARGV)
    flags = ["--hf-checkpoint", "/m", "--ref-load", "/m", "--load", str(ckpt), "--save", str(ckpt)]
    out = subprocess.run([sys.executable, str(ROOT / "workloads" / "pod" / "miles_launcher.py"), "--marker",
                          str(ckpt / "RUNNING"), str(entry), *flags], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_a_fresh_run_is_not_given_its_checkpoint_dir_as_load(tmp_path):
    """Slime v0.2.4 keeps a given --load and loads it as an HF checkpoint unless it holds
    latest_checkpointed_iteration.txt (slime/utils/arguments.py:1549-1561, backends/megatron_utils/
    checkpoint.py:99-126 at bd217a63); the lease the launcher writes makes the dir non-empty."""
    ckpt = tmp_path / "ckpt"
    seen = _argv_seen(tmp_path, ckpt)
    assert "--load" not in seen and seen[seen.index("--save") + 1] == str(ckpt)


def _megatron_save(save):
    """What Megatron's torch_dist save leaves: ``metadata.json`` as ``save_config`` writes it
    (``json.dump(asdict(CheckpointingConfig))``, megatron/core/dist_checkpointing/core.py@235952df)."""
    save.mkdir(parents=True)
    (save / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist", "sharded_backend_version": 1}))


def test_a_run_with_a_complete_megatron_save_resumes_from_it(tmp_path):
    ckpt = tmp_path / "ckpt"
    _megatron_save(ckpt / "iter_0000020")
    (ckpt / "latest_checkpointed_iteration.txt").write_text("20")
    seen = _argv_seen(tmp_path, ckpt)
    assert seen[seen.index("--load") + 1] == str(ckpt)


def test_a_tracker_naming_a_missing_save_stops_the_launcher_instead_of_restarting(tmp_path):
    """Megatron writes the tracker after the save it names (megatron/training/checkpointing.py); a tracker
    without its iter_<7 digits> dir is a damaged checkpoint: neither resume from it nor start over."""
    import pytest

    from workloads.pod.miles_launcher import resume_flags
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    assert resume_flags(["--load", str(ckpt), "--lr", "1"]) == ["--lr", "1"]
    assert resume_flags([f"--load={ckpt}"]) == []
    (ckpt / "latest_checkpointed_iteration.txt").write_text("40\n")  # iter_0000040 absent
    with pytest.raises(SystemExit, match="iter_0000040"):
        resume_flags(["--load", str(ckpt)])
    _megatron_save(ckpt / "iter_0000040")
    assert resume_flags(["--load", str(ckpt)]) == ["--load", str(ckpt)]


def test_an_empty_or_unreadable_tracker_stops_the_launcher(tmp_path):
    """Megatron's read_metadata exits on a tracker that is neither an iteration nor ``release``
    (megatron/training/checkpointing.py:362-378@235952df): the launcher says so before Miles starts."""
    from workloads.pod.miles_launcher import resume_flags
    ckpt = tmp_path / "ckpt"
    _megatron_save(ckpt / "iter_0000000")
    for text, why in (("", "empty"), ("\n", "empty"), ("iter_40", "'iter_40' is neither")):
        (ckpt / "latest_checkpointed_iteration.txt").write_text(text)
        with pytest.raises(SystemExit, match=why):
            resume_flags(["--load", str(ckpt)])


@pytest.mark.parametrize("kept", ["metadata.json", "mp_rank_00", ".metadata", None, "bad-json", "no-backend",
                                  "bad-json beside .metadata", "a list beside .metadata"])
def test_a_save_without_megatrons_metadata_stops_the_launcher(tmp_path, kept):
    """A save Megatron recognises by none of its formats' metadata (``_get_checkpoint_format``:
    metadata.json, mp_rank_0*, .metadata; else "unknown checkpoint format") is refused."""
    from workloads.pod.miles_launcher import resume_flags
    ckpt, save = tmp_path / "ckpt", tmp_path / "ckpt" / "release"
    save.mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("release")
    (save / "common.pt").write_text("")
    if kept == "metadata.json":
        _megatron_save(save / "x")
        (save / "x" / "metadata.json").rename(save / "metadata.json")
    elif kept == "bad-json":
        (save / "metadata.json").write_text("{")
    elif kept == "no-backend":  # CheckpointingConfig(**{}) raises: sharded_backend has no default
        (save / "metadata.json").write_text("{}")
    elif kept and kept.endswith("beside .metadata"):  # every torch_dist save has .metadata: metadata.json decides first
        (save / ".metadata").mkdir()
        (save / "metadata.json").write_text("{" if kept.startswith("bad") else "[1]")
    elif kept:
        (save / kept).mkdir()
    if kept is None or kept in ("bad-json", "no-backend") or kept.endswith("beside .metadata"):
        with pytest.raises(SystemExit, match="holds no metadata.json, mp_rank_0"):
            resume_flags(["--load", str(ckpt)])
    else:
        assert resume_flags(["--load", str(ckpt)]) == ["--load", str(ckpt)]


def test_the_teed_driver_log_names_its_ray_job_and_passes_the_ownership_check(tmp_path):
    """Ray's `Running entrypoint for job` line goes to Ray's own log, not to the launcher's tee; the
    tee starts with the submission id Ray hands the driver (RAY_JOB_CONFIG_JSON_ENV_VAR), so the
    collected log is known to be the attempt's own (bench.checks.check_own_log)."""
    from types import SimpleNamespace

    import pytest

    from bench.artifacts import ArtifactError
    from bench.checks import check_own_log
    from workloads.pod.miles_launcher import JOB_CONFIG_ENV

    log = tmp_path / "driver-1.log"
    config = json.dumps({"runtime_env": {}, "metadata": {"job_submission_id": "r-1-abcde", "job_name": "r-1-abcde"}})
    code = ("import sys; from pathlib import Path; from workloads.pod.miles_launcher import tee_driver_log; "
            f"tee_driver_log(Path({str(log)!r})); print('perf 0'); sys.stdout.flush()")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True,
                   env={"PYTHONPATH": str(ROOT), JOB_CONFIG_ENV: config})
    text = log.read_text()
    assert text.splitlines()[-1] == "perf 0"
    own = SimpleNamespace(attempt=SimpleNamespace(folder="a/r1"), rayjobs=[{"status": {"jobId": "r-1-abcde"}}])
    check_own_log(own, text)
    other = SimpleNamespace(attempt=SimpleNamespace(folder="a/r1"), rayjobs=[{"status": {"jobId": "r-2-fghij"}}])
    with pytest.raises(ArtifactError, match="of job r-1-abcde"):
        check_own_log(other, text)
