"""Each team's share of the FSx for Lustre file system: a Lustre project quota on its directories,
set by the team-directories Job (``render.teams.team_directories_job``) once they exist.

FSx for Lustre enforces user, group and project quotas on every file system and cannot turn that off;
project quotas need Lustre 2.15 (the stack's file systems are, ``components.fsx``) and are set from a
client with ``lfs`` (FSx for Lustre User Guide, "Using Lustre storage quotas"). Per team, two commands
(Lustre Operations Manual, lfs-project(1) and lfs-setquota(1)):

- ``lfs project -p <id> -s -r <dir>...``: the team's directories and everything in them get the team's
  project ID, and the inherit flag, so what its pods create later is counted too;
- ``lfs setquota -p <id> -B <GiB>G <path>``: the project's hard block limit (no soft limit, so no
  grace period: a write past the limit fails at once with ``EDQUOT``).

The image is the FSx CSI driver's, which the nodes already run and which carries the Lustre client
utilities (kubernetes-sigs/aws-fsx-csi-driver Dockerfile: ``lustre-client`` on Amazon Linux 2023); it
has no shell, so each command is a container of its own. Setting a quota takes ``CAP_SYS_ADMIN`` (as
``quotactl(2)``'s set operations do) and changing a project ID ``CAP_SYS_RESOURCE`` (Lustre's MDT refuses
a project change without it, lustre/mdd/mdd_object.c ``mdd_fix_attr``, unless ``enable_chprojid_gid``
admits the caller's group): each container adds the one it needs to a read-only root and nothing else.
Both are idempotent, so the Job runs again on every deploy that changes it.
"""

from __future__ import annotations

from stackconfig.images import localized

from workloads.derive.model import WorkloadModel
from workloads.render.common import FSX_VOLUME, security_context
from workloads.schema.teams import team_checkpoint_directory, team_directory, team_file_system_quotas, team_project_id

QUOTA_CAPABILITIES = {"lfs-project": "SYS_RESOURCE", "lfs-setquota": "SYS_ADMIN"}
"""The one capability each kind of quota container adds (``<kind>-<team>``)."""


def _lfs(m: WorkloadModel, kind: str, team: str, command: list[str], sub_paths: list[str]) -> dict:
    sc = security_context(read_only=True)
    sc["capabilities"]["add"] = [QUOTA_CAPABILITIES[kind]]
    return {"name": f"{kind}-{team}", "image": localized(m.charts.image("fsx-csi-driver")),
            "imagePullPolicy": "IfNotPresent", "command": command,
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
            "securityContext": sc,
            "volumeMounts": [{"name": FSX_VOLUME, "mountPath": f"{m.paths.mount}/{p}", "subPath": p} for p in sub_paths]}


def quota_containers(m: WorkloadModel) -> list[dict]:
    """Per team: tag its directories with its project ID, and set the project's hard limit. Each
    container mounts only the team's directories (the quota call needs a path on the file system)."""
    teams = m.settings.teams
    quotas = team_file_system_quotas(teams, m.settings.storage.capacity_gib)
    out = []
    for t in teams:
        pid, home, saves = str(team_project_id(t.name)), team_directory(t.name), team_checkpoint_directory(t.name)
        out.append(_lfs(m, "lfs-project", t.name, ["lfs", "project", "-p", pid, "-s", "-r",
                                                   f"{m.paths.mount}/{home}", f"{m.paths.mount}/{saves}"], [home, saves]))
        out.append(_lfs(m, "lfs-setquota", t.name, ["lfs", "setquota", "-p", pid, "-B", f"{quotas[t.name]}G",
                                                    f"{m.paths.mount}/{home}"], [home]))
    return out
