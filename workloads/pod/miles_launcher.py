"""The Miles driver's launcher: every submit path runs Miles through it.

    python3 miles_launcher.py [--marker <checkpoint dir>/RUNNING]     # argv from $MILES_ARGV (JSON)
    python3 miles_launcher.py /root/miles/train.py <Miles flags>       # or given directly

**Argv through the environment.** A RayJob's entrypoint is parsed by bash in KubeRay's submitter
(common/job.go BuildJobSubmitCommand), re-joined by Ray's CLI with ``list2cmdline`` and run again by
``sh`` (ray/dashboard/modules/job/cli.py, job_supervisor.py ``shell=True``): quotes do not survive
that. So the entrypoint holds only this launcher and plain paths, and Miles' argv travels as JSON in
the job's runtime environment, which Ray applies to the driver process.

**Training actors on the training group.** Miles 49cac7b5 (miles/ray/placement_group.py) asks Ray
for one PACK placement group of ``{"GPU": 1, "CPU": 1}`` bundles, sorts the bundles by ``sort_key``
(node IP, then GPU id) and gives the first ``--actor-num-nodes`` x ``--actor-num-gpus-per-node`` of
that order to training. The training and rollout pools share one subnet (EFA OS-bypass traffic does
not cross subnets), so IP order mixes them. Both names are looked up in that module when the group
is made, so the launcher replaces them before the entry point runs:

- ``placement_group`` gets a per-bundle label selector (Ray >= 2.49 ``bundle_label_selector``): the
  first training-GPU bundles on ``ray.io/node-group: trainer``, the others on ``rollout``. Ray labels
  every node with ``ray.io/node-group`` from ``RAY_NODE_TYPE_NAME`` (ray/_private/
  resource_and_label_spec.py, 2.53), which KubeRay sets to the pod's worker group (ray-operator/
  controllers/ray/common/pod.go:1266, v1.7.0) and the TorchX roles set themselves;
- ``sort_key`` ranks the training bundles first and keeps Miles' own order within each part.

Another bundle count (colocated, debug or external-rollout layouts) is passed through unchanged.

**A lease while the run is in progress** (``--marker``, ``--attempt``): the file holds the attempt's
number, its mtime is refreshed every ``LEASE_REFRESH_S`` while Miles runs, and it is removed when
the launcher exits (unless a later attempt has taken it). A pod's preStop
hook asks for a checkpoint only while the lease is fresh (``render.runs.SAVE_ON_STOP``), so a driver
that was killed (its lease goes stale) never holds pods for the whole grace period. A save sentinel
left from an earlier attempt is removed before Miles starts.

**``--load`` only where there is a save to resume** (``resume_flags``): Slime v0.2.4 keeps a given
``--load`` and, in bridge mode, reads a directory without Megatron's tracker as an HF checkpoint
(slime/utils/arguments.py:1549-1561, backends/megatron_utils/checkpoint.py:99-126 at bd217a63), so a
fresh run (its directory holds only the lease) would crash. The launcher passes ``--load`` only when
``latest_checkpointed_iteration.txt`` names a save that is there; without it both Slime and Miles
49cac7b5 (miles/utils/arguments.py:3035-3045, which already falls back the same way) start from
``--ref-load``. A damaged checkpoint stops the launcher (neither resume nor start over): a tracker that
is empty or names no iteration (Megatron would exit, ``read_metadata``), one naming a missing save, or a
save that holds none of the metadata by which Megatron recognises a checkpoint format (it would raise
"unknown checkpoint format", ``_get_checkpoint_format``).

**Saves removed at the end when asked** (``CLEAR_SAVES_ENV``, set by ``bench run``): Miles saves at the last
rollout whatever the interval (radixark/miles 49cac7b5 ``miles/utils/misc.py:147-148``, ``train.py:121-125``)
and the retain interval keeps the latest save, so a finished benchmark attempt would leave a whole save on the
file system that the next attempt needs (``bench.storage``). Once the entry point has returned (every rollout
done and saved), the launcher removes the saves under ``--save`` (``clear_saves``); a failed or stopped run
keeps them, to resume from.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import runpy
import signal
import sys
import threading
from pathlib import Path

NODE_GROUP_LABEL = "ray.io/node-group"
TRAIN_GROUP, ROLLOUT_GROUP = "trainer", "rollout"
ARGV_ENV = "MILES_ARGV"
LEASE_REFRESH_S = 30
LEASE_STALE_MIN = 2
"""A lease not refreshed for this many minutes is stale (``find -mmin -2`` in the preStop hook)."""
SAVE_TRIGGER = "SAVE_NOW"
CLEAR_SAVES_ENV = "MILES_CLEAR_SAVES_AT_END"
"""``1``: remove the run's saves once the entry point has returned (``clear_saves``)."""
JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
"""The driver's JobConfig as JSON, set by Ray's job supervisor; its ``metadata["job_submission_id"]`` is
the submission id (ray 2.53.0 ``dashboard/modules/job/job_supervisor.py`` ``_get_driver_env_vars``,
``common.py`` ``JOB_ID_METADATA_KEY``; ``RAY_JOB_ID`` is stripped from the driver's environment,
``_private/ray_constants.py`` ``RAY_INTERNAL_FLAGS``). KubeRay v1.7.0 submits with ``--submission-id``
``status.jobId`` (``ray-operator/controllers/ray/common/job.go:113,189``)."""
JOB_LINE = "Driver log of job {job_id}: teed by miles_launcher.py"
"""The tee's first line: which Ray job wrote it (``bench.checks.check_own_log`` reads it; Ray's own
``Running entrypoint for job`` line goes to Ray's log only)."""


def layout(miles_flags: list[str]) -> tuple[int, int] | None:
    """(training GPUs, rollout GPUs) from Miles' own layout flags, or None when one is missing."""
    p = argparse.ArgumentParser(add_help=False)
    for flag in ("--actor-num-nodes", "--actor-num-gpus-per-node", "--rollout-num-gpus"):
        p.add_argument(flag, type=int)
    a, _ = p.parse_known_args(miles_flags)
    if None in (a.actor_num_nodes, a.actor_num_gpus_per_node, a.rollout_num_gpus):
        return None
    return a.actor_num_nodes * a.actor_num_gpus_per_node, a.rollout_num_gpus


def pin(module, train_gpus: int, rollout_gpus: int) -> None:
    """Replace ``module.placement_group`` and ``module.sort_key`` (Miles' placement_group module)."""
    make, order = module.placement_group, module.sort_key

    def placement_group(bundles, *args, **kwargs):
        if len(bundles) == train_gpus + rollout_gpus and "bundle_label_selector" not in kwargs:
            kwargs["bundle_label_selector"] = [
                {NODE_GROUP_LABEL: TRAIN_GROUP if i < train_gpus else ROLLOUT_GROUP} for i in range(len(bundles))]
        return make(bundles, *args, **kwargs)

    def sort_key(info):
        index = info[0]
        return (0 if index < train_gpus else 1, order(info))

    module.placement_group, module.sort_key = placement_group, sort_key


class Lease:
    """``path`` holds this attempt's number, freshly touched, exactly while the run is in progress."""

    def __init__(self, path: Path, attempt: str):
        self.path, self.attempt, self._done = path, attempt, threading.Event()

    def __enter__(self) -> "Lease":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        (self.path.parent / SAVE_TRIGGER).unlink(missing_ok=True)  # an earlier attempt's request
        self.path.write_text(self.attempt)
        threading.Thread(target=self._refresh, daemon=True).start()
        return self

    def _ours(self) -> bool:
        try:
            return self.path.read_text() == self.attempt
        except OSError:
            return False

    def _refresh(self) -> None:
        while not self._done.wait(LEASE_REFRESH_S):
            if self._ours():
                self.path.touch()

    def __exit__(self, *_) -> None:
        self._done.set()
        if self._ours():  # a later attempt's lease is not ours to remove
            self.path.unlink(missing_ok=True)


def _stopper(lease: "Lease | None"):
    """Ray stops a job with SIGTERM and kills it 3 s later (RAY_JOB_STOP_WAIT_TIME_S): release the
    lease at once, then unwind."""
    def stop(signum, _frame) -> None:
        if lease is not None:
            lease.__exit__()
        raise SystemExit(128 + signum)
    return stop


TRACKER = "latest_checkpointed_iteration.txt"
"""Megatron's tracker, written after the save it names is complete (radixark/Megatron-LM@235952df:
megatron/training/checkpointing.py:349-352 ``get_checkpoint_tracker_filename``, :362-378
``read_metadata``: an iteration number or ``release``; the save is ``iter_<7 digits>`` or ``release``, :216-220)."""


DIST_CONFIG = "metadata.json"
"""What Megatron recognises a save by (radixark/Megatron-LM@235952df megatron/training/checkpointing.py:1624-1646
``_get_checkpoint_format``): ``metadata.json`` naming its ``sharded_backend`` (torch_dist:
megatron/core/dist_checkpointing/core.py:13,37-70, written by ``save_config``), else an ``mp_rank_0*``
entry (torch), else ``.metadata`` (torch_dcp)."""


def _damaged(load: Path, why: str) -> SystemExit:
    return SystemExit(f"miles_launcher: {load}/{TRACKER}: {why}: the checkpoint is damaged; restore it "
                      f"(or remove the tracker to start over)")


def _save_dir(load: Path) -> Path | None:
    """The save ``load``'s tracker names, or None when there is no tracker; a tracker Megatron would
    refuse (empty, or neither an iteration number nor ``release``: ``read_metadata``) stops the launcher."""
    try:
        text = (load / TRACKER).read_text().strip()
    except OSError:
        return None
    if text != "release" and not text.isdigit():
        raise _damaged(load, f"{text!r} is neither an iteration number nor 'release'" if text else "empty")
    return load / ("release" if text == "release" else f"iter_{int(text):07d}")


def _recognised(save: Path) -> bool:
    """``save`` holds the metadata of a format Megatron loads (``DIST_CONFIG``). A ``DIST_CONFIG`` that is there
    decides alone: Megatron reads it first and raises on one that is not a mapping naming its
    ``sharded_backend`` (Megatron-LM@235952df megatron/core/dist_checkpointing/core.py:37-70, maybe_load_config),
    whatever ``.metadata`` beside it says."""
    if (save / DIST_CONFIG).exists():
        try:
            config = json.loads((save / DIST_CONFIG).read_text())
        except (OSError, ValueError):
            return False
        return isinstance(config, dict) and "sharded_backend" in config
    return any(p.name.startswith("mp_rank_0") for p in save.iterdir()) or (save / ".metadata").exists()


def resume_flags(flags: list[str]) -> list[str]:
    """``flags`` with ``--load <dir>`` kept only when ``<dir>`` holds a complete Megatron save."""
    out, i = [], 0
    while i < len(flags):
        token = flags[i]
        if token == "--load" and i + 1 < len(flags):
            load, width = flags[i + 1], 2
        elif token.startswith("--load="):
            load, width = token.split("=", 1)[1], 1
        else:
            out.append(token)
            i += 1
            continue
        save = _save_dir(Path(load))
        if save is not None and not save.is_dir():
            raise _damaged(Path(load), f"names {save.name}, which is not there")
        if save is not None and not _recognised(save):
            raise _damaged(Path(load), f"names {save.name}, which holds no {DIST_CONFIG}, mp_rank_0* or .metadata")
        if save is not None:
            out.extend(flags[i:i + width])
        i += width
    return out


ROLLOUT_STATE = "rollout"
"""Miles' data-source state beside the save, ``rollout/global_dataset_state_dict_<id>.pt`` (radixark/miles
49cac7b5 ``miles/rollout/data_source.py:135``)."""


def _flag_value(flags: list[str], name: str) -> str | None:
    for i, token in enumerate(flags):
        if token == name and i + 1 < len(flags):
            return flags[i + 1]
        if token.startswith(f"{name}="):
            return token.split("=", 1)[1]
    return None


def clear_saves(flags: list[str]) -> list[str]:
    """Remove what the run saved under ``--save``: Megatron's tracker first (so a half-cleared directory never
    names a save that is gone), then its saves (``iter_<7 digits>``, ``release``: ``TRACKER``) and Miles'
    rollout state; the lease, the driver logs and anything else stay. The names removed."""
    import shutil
    save = _flag_value(flags, "--save")
    if save is None or not Path(save).is_dir():
        return []
    root = Path(save)
    saves = [root / TRACKER] + sorted(p for p in root.iterdir() if p.is_dir() and (
        p.name == "release" or (p.name.startswith("iter_") and p.name[5:].isdigit())))
    state = root / ROLLOUT_STATE
    saves += sorted(state.glob("global_dataset_state_dict_*.pt")) if state.is_dir() else []
    removed = []
    for path in saves:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        else:
            continue
        removed.append(str(path.relative_to(root)))
    if state.is_dir() and not any(state.iterdir()):
        state.rmdir()
    return removed


def run(argv: list[str]) -> None:
    """Run the entry point ``argv[0]`` with flags ``argv[1:]`` in this process, pinned."""
    entry = argv[0]
    sys.path.insert(0, os.path.dirname(os.path.abspath(entry)))  # as `python3 <entry>` would
    gpus = layout(argv[1:])
    if gpus is not None:
        # Miles' or Slime's own module (the entry point's checkout: /root/miles or /root/slime); Slime
        # v0.2.4 slime/ray/placement_group.py has the same placement_group and sort_key (:20, :44).
        module = importlib.import_module(f"{os.path.basename(os.path.dirname(os.path.abspath(entry)))}.ray.placement_group")
        pin(module, *gpus)
    sys.argv = [entry, *resume_flags(argv[1:])]
    runpy.run_path(entry, run_name="__main__")


def driver_log_path(marker: Path | str, attempt: str | int) -> Path:
    """Where the launcher tees the driver's output: next to the lease, in the run's checkpoint
    directory on FSx, which the file system exports to the team's bucket prefix (``workloads.teams``
    ``team_checkpoint_directory``), so the log outlives the pods and the cluster."""
    return Path(marker).parent / f"driver-{attempt}.log"


def submission_id(env: "dict[str, str]") -> str | None:
    """The Ray job's submission id from ``JOB_CONFIG_ENV``, or None outside a Ray job."""
    raw = env.get(JOB_CONFIG_ENV)
    return ((json.loads(raw).get("metadata") or {}).get("job_submission_id")) if raw else None


def tee_driver_log(path: Path) -> threading.Thread:
    """Start with ``JOB_LINE`` naming this process's Ray job (when it runs as one), then copy everything
    written to this process's stdout and stderr (file descriptors 1 and 2, so Ray's forwarded worker
    lines and native writes too) to ``path`` as well, appended, unbuffered. Ray's job supervisor keeps reading the original stdout (``ray job logs``). At exit the descriptors are put
    back, which ends the copy; the returned thread is joined then."""
    import atexit
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = os.dup(1), os.dup(2)
    read, write = os.pipe()
    log = open(path, "ab", buffering=0)  # noqa: SIM115 (closed by the copier)
    job_id = submission_id(dict(os.environ))
    if job_id:
        log.write((JOB_LINE.format(job_id=job_id) + "\n").encode())

    def copy() -> None:
        with log:
            while chunk := os.read(read, 1 << 16):
                os.write(saved[0], chunk)
                log.write(chunk)
        os.close(read)

    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(write, 1)
    os.dup2(write, 2)
    os.close(write)
    copier = threading.Thread(target=copy, name="driver-log-tee", daemon=True)  # joined at exit (restore)
    copier.start()

    def restore() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)  # the last writers of the pipe are gone: the copier reads EOF
        os.dup2(saved[1], 2)
        copier.join(timeout=10)
    atexit.register(restore)
    return copier


def main(args: list[str]) -> None:
    p = argparse.ArgumentParser(prog="miles_launcher.py")
    p.add_argument("--marker", type=Path, help="lease file kept fresh while Miles runs")
    p.add_argument("--attempt", default="1", help="the attempt the lease names")
    p.add_argument("argv", nargs=argparse.REMAINDER, help=f"entry point and flags (default: ${ARGV_ENV})")
    a = p.parse_args(args)
    argv = a.argv or json.loads(os.environ[ARGV_ENV])
    lease = None if a.marker is None else Lease(a.marker, a.attempt)
    if a.marker is not None:
        tee_driver_log(driver_log_path(a.marker, a.attempt))
    signal.signal(signal.SIGTERM, _stopper(lease))
    if lease is None:
        run(argv)
    else:
        with lease:
            run(argv)
    if os.environ.get(CLEAR_SAVES_ENV) == "1":  # reached only when the entry point returned
        removed = clear_saves(argv[1:])
        print(f"miles_launcher: the run finished: removed its saves ({', '.join(removed) or 'none'})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
