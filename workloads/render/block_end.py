"""Capacity Block end: a CronJob that asks Miles for a checkpoint before the block's nodes drain,
without following any link a team plants in its directory."""

from __future__ import annotations

import shlex

from workloads.derive.model import WorkloadModel
from workloads.pod.miles_launcher import SAVE_TRIGGER
from workloads.derive.paths import RUNNING_MARKER
from workloads.schema.services import CAPACITY_BLOCK_DRAIN_MINUTES
from workloads.schema.teams import team_checkpoint_directory
from workloads.render.common import file_system_container, file_system_pod, file_system_task, labels, meta

# --- Capacity Block end --------------------------------------------------------------------------

CHECKPOINT_TRIGGER = "checkpoint-before-block-end"
TRIGGER_EARLY_SECONDS = 300
"""The guard accepts a start up to five minutes before the scheduled minute (clock skew)."""


def _utc(t) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def trigger_script(m: WorkloadModel, team: str | None = None) -> str:
    """Create the sentinel once: only between the scheduled time and the start of the drain. A cron
    schedule names no year, so the same minute comes back every year; the guard makes it a no-op.
    ``team``: the script of that team's container (runs mode), else of the stack's own run."""
    end = m.block_end
    start = int(end.trigger.timestamp()) - TRIGGER_EARLY_SECONDS
    stop = int(end.drain.timestamp())
    return "\n".join([
        "set -eu",
        'now="$(date -u +%s)"',
        f'if [ "$now" -lt {start} ] || [ "$now" -ge {stop} ]; then',
        f'  echo "not between {_utc(end.trigger)} and the drain at {_utc(end.drain)} (Capacity Block of '
        f'{", ".join(end.pools)} ends {_utc(end.end)}): nothing to do"',
        "  exit 0",
        "fi",
        *(_the_team_runs(m, team) if team is not None else _the_stack_run(m)),
    ])


def _the_stack_run(m: WorkloadModel) -> list[str]:
    p = m.paths
    return [f"mkdir -p {shlex.quote(p.checkpoints)}",
            f"touch {shlex.quote(p.save_trigger)}",
            f'echo "created {p.save_trigger}: Miles saves a checkpoint after its current step"']


def _the_team_runs(m: WorkloadModel, team: str) -> list[str]:
    """The sentinel of every run of ``team`` in progress (its entrypoint keeps ``RUNNING`` in its
    checkpoint directory, ``render.runs``). The team owns everything below its directory, so
    nothing there is trusted: ``find`` without -L/-H/-follow lists only a real ``RUNNING`` file
    reached through real directories, and the sentinel is created with noclobber (``set -C``: POSIX
    sh, an exclusive create; ``O_CREAT|O_EXCL`` fails on any symlink, dangling or not), never
    through ``touch``, which follows a planted link."""
    root = f"{m.paths.mount}/{team_checkpoint_directory(team)}"
    return [f"root={shlex.quote(root)}",
            f'find "$root" -mindepth 2 -maxdepth 2 -path "$root/*/{RUNNING_MARKER}" -type f |',
            "while IFS= read -r marker; do",
            f'  sentinel="${{marker%/{RUNNING_MARKER}}}/{SAVE_TRIGGER}"',
            '  if [ -e "$sentinel" ] || [ -L "$sentinel" ]; then echo "$sentinel exists: left alone"; continue; fi',
            '  if (set -C; : > "$sentinel") 2>/dev/null; then',
            '    echo "created $sentinel: that run saves after its current step"',
            "  else",
            '    echo "could not create $sentinel"',
            "  fi",
            "done"]


def trigger_template(m: WorkloadModel) -> dict:
    """The stack's own run: one container under ``checkpoints/``. Runs mode: one container per
    team that mounts only that team's directory, so a link a team plants resolves inside its own
    directory whatever the script does."""
    if not m.runs:
        return file_system_task(m, CHECKPOINT_TRIGGER, ["/bin/sh", "-c", trigger_script(m)])
    return file_system_pod(m, CHECKPOINT_TRIGGER, [
        file_system_container(m, f"team-{t.name}", ["/bin/sh", "-c", trigger_script(m, t.name)],
                              sub_path=team_checkpoint_directory(t.name))
        for t in m.settings.teams])


def checkpoint_trigger_cronjob(m: WorkloadModel) -> dict:
    """Ask Miles for a checkpoint ``leadMinutes`` before the earliest Capacity Block end of the GPU
    pools: a CronJob (cpu pool) on that UTC minute, day and month that creates the sentinel file."""
    end = m.block_end
    t = end.trigger
    lead = m.settings.capacity_block_end.lead_minutes
    md = meta(m, CHECKPOINT_TRIGGER)
    md["annotations"] = {"rl.platform/capacity-block-end": _utc(end.end),
                        "rl.platform/capacity-block-pools": ",".join(end.pools)}
    return {
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": md,
        "spec": {
            "schedule": f"{t.minute} {t.hour} {t.day} {t.month} *",
            "timeZone": "Etc/UTC",
            # Never start once the drain has begun: the nodes are going.
            "startingDeadlineSeconds": (lead - CAPACITY_BLOCK_DRAIN_MINUTES) * 60,
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"metadata": {"labels": labels(CHECKPOINT_TRIGGER)},
                            "spec": {"backoffLimit": 3, "activeDeadlineSeconds": 600,
                                     "template": trigger_template(m)}},
        },
    }
