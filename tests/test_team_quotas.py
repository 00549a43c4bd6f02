"""Each team's share of the one FSx for Lustre file system (issue 35 item 6): a Lustre project quota per
team on its directories, sized in the stack file, checked against the file system's capacity, set by the
team-directories Job and printed by the plan."""

from __future__ import annotations

import kubernetes_validate
import pytest
from test_workloads import k8s_version, variant

from workloads.derive.model import derive
from workloads.render.teams import team_directories_job
from workloads.schema.teams import TeamSettings, team_file_system_quotas, team_project_id

SHARED = "p5en-shared"


def _teams(*gib: int | None) -> list[TeamSettings]:
    return [TeamSettings(name=n, fileSystemGib=g) for n, g in zip(("alpha", "beta", "gamma"), gib)]


def test_the_job_tags_each_teams_directories_and_sets_its_hard_limit():
    cfg = variant(SHARED, {})
    job = team_directories_job(derive(cfg))
    spec = job["spec"]["template"]["spec"]
    commands = {c["name"]: c["command"] for c in spec["containers"]}
    alpha, beta = str(team_project_id("alpha")), str(team_project_id("beta"))
    assert commands["lfs-project-alpha"] == ["lfs", "project", "-p", alpha, "-s", "-r", "/mnt/fsx/teams/alpha",
                                             "/mnt/fsx/checkpoints/teams/alpha"]
    assert commands["lfs-setquota-alpha"] == ["lfs", "setquota", "-p", alpha, "-B", "2400G", "/mnt/fsx/teams/alpha"]
    assert commands["lfs-setquota-beta"] == ["lfs", "setquota", "-p", beta, "-B", "1600G", "/mnt/fsx/teams/beta"]
    # the directories exist first (init containers); each quota container adds one capability and sees only its team
    assert [c["command"][0] for c in spec["initContainers"]] == ["mkdir", "mkdir"]
    for c in spec["containers"]:
        assert c["securityContext"]["capabilities"] == {
            "drop": ["ALL"], "add": ["SYS_RESOURCE" if c["name"].startswith("lfs-project-") else "SYS_ADMIN"]}
        assert all(v["subPath"].endswith("/" + c["name"].rsplit("-", 1)[1]) for v in c["volumeMounts"])
        assert "fsx-csi-driver" in c["image"]  # the Lustre client utilities the nodes already pull
    kubernetes_validate.validate(job, k8s_version(cfg), strict=True)


def test_quotas_default_to_an_equal_share_and_never_exceed_the_file_system():
    assert team_file_system_quotas(_teams(None, None), 4800) == {"alpha": 2400, "beta": 2400}
    assert team_file_system_quotas(_teams(3000, None, None), 4800) == {"alpha": 3000, "beta": 900, "gamma": 900}
    with pytest.raises(ValueError, match=r"workloads.teams\[\].fileSystemGib: the teams' quotas add up to 6000 GiB, "
                                         r"more than the 4800 GiB file system \(workloads.storage.capacityGib\)"):
        team_file_system_quotas(_teams(4000, 2000), 4800)
    with pytest.raises(ValueError, match=r"leave 0 GiB of the 4800 GiB file system for team\(s\) beta"):
        team_file_system_quotas(_teams(4800, None), 4800)


def test_a_stack_whose_quotas_overflow_the_file_system_is_refused_naming_the_field():
    teams = variant(SHARED, {}).workloads.teams
    over = [{**t.model_dump(by_alias=True, exclude_none=True), "fileSystemGib": 4000} for t in teams]
    with pytest.raises(Exception, match=r"fileSystemGib: the teams' quotas add up to 8000 GiB"):
        variant(SHARED, {"workloads": {"teams": over}})


def test_a_teams_project_id_does_not_follow_its_place_in_the_stack():
    """Reordering (or removing) teams must not hand one team's files to another's quota."""
    teams = variant(SHARED, {}).workloads.teams
    swapped = [t.model_dump(by_alias=True, exclude_none=True) for t in teams[::-1]]

    def ids(cfg) -> dict[str, str]:
        spec = team_directories_job(derive(cfg))["spec"]["template"]["spec"]
        return {c["name"]: c["command"][3] for c in spec["containers"] if c["name"].startswith("lfs-setquota-")}
    assert ids(variant(SHARED, {})) == ids(variant(SHARED, {"workloads": {"teams": swapped}}))
    assert len(set(ids(variant(SHARED, {})).values())) == 2
    assert all(1000 <= team_project_id(n) < 2 ** 31 for n in ("a", "alpha", "z" * 40))
