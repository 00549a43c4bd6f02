"""The reward service as the stack renders it (issue 35 item 5): one port per caller, a team's namespace
reaching only its own port (how the server tells teams apart, so a tenant cannot claim another's share),
a team run's ``--rm-url`` on that port, and the server's limits passed from the stack file."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT
from test_workloads import variant
from test_workloads_security import Pod, allowed

from workloads import render as M
from workloads.checks.runs import load_run
from workloads.deploy.submit import run_objects
from workloads.derive.model import derive
from workloads.render.teams import team_network_policies

SHARED = "p5en-shared"


def _model(override: dict | None = None):
    return derive(variant(SHARED, override or {}))


def test_each_caller_has_its_own_port_and_the_server_its_limits():
    m = _model({"workloads": {"reward": {"maxBodyKib": 512, "queuePerTeam": 64}}})
    c = M.reward_template(m)["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert json.loads(env["REWARD_PORTS"]) == {m.namespace: 8000, "team alpha": 8001, "team beta": 8002}
    assert (env["MAX_BODY_BYTES"], env["QUEUE_PER_TEAM"]) == (str(512 * 1024), "64")
    assert [p["containerPort"] for p in c["ports"]] == [8000, 8001, 8002]
    service = M.reward_service(m)
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        (8000, "http"), (8001, "team-1"), (8002, "team-2")]
    assert c["readinessProbe"]["httpGet"]["port"] == "http"


def test_a_teams_ray_pods_reach_only_their_own_port():
    m = _model()
    policies = M.network_policies(m)
    for team in m.settings.teams:
        port = m.settings.reward.team_ports(["alpha", "beta"])[team.name]
        policies += team_network_policies(team, m.namespace, port)
    reward = Pod("reward", m.namespace, M.reward_template(m)["metadata"]["labels"])
    alpha, beta = (Pod(f"{t}-trainer", f"team-{t}", dict(M.RAY_PODS)) for t in ("alpha", "beta"))
    platform = Pod("trainer", m.namespace, dict(M.RAY_PODS))
    assert allowed(policies, alpha, reward, 8001) and allowed(policies, beta, reward, 8002)
    assert allowed(policies, platform, reward, 8000)
    for src, port in ((alpha, 8000), (alpha, 8002), (beta, 8001), (beta, 8000), (platform, 8001)):
        assert not allowed(policies, src, reward, port), (src.namespace, port)


def test_a_team_runs_rm_url_is_its_own_port():
    cfg = variant(SHARED, {})
    job = run_objects(cfg, load_run(ROOT / "runs" / "beta-lr-sweep.yaml")).rayjob
    words = json.dumps(job)
    assert f"reward.{cfg.checkpoints.namespace}.svc.cluster.local:8002/reward" in words
    assert ":8000/reward" not in words


def test_too_many_teams_for_the_port_is_refused_with_the_field():
    with pytest.raises(ValueError, match=r"workloads.reward.port: 65535 leaves no port for each of 2 teams"):
        _model({"workloads": {"reward": {"port": 65535}}}).settings.reward.team_ports(["alpha", "beta"])


def test_a_run_whose_step_can_outgrow_its_teams_reward_queue_is_refused():
    """Miles fails a rollout step on the first 429: a step's samples must fit the team's share."""
    cfg = variant(SHARED, {})
    run = load_run(ROOT / "runs" / "beta-lr-sweep.yaml")
    fits = run.model_copy(update={"grpo": run.grpo.model_copy(update={"rollout_batch_size": 256})})  # 2048 <= 2 x 1025
    run_objects(cfg, fits)
    big = run.model_copy(update={"grpo": run.grpo.model_copy(update={"rollout_batch_size": 512})})  # 4096
    with pytest.raises(ValueError, match=r"run beta-lr-sweep: grpo: 4096 samples per rollout step .* more than the "
                                         r"2050 requests .*workloads.reward.replicas 2 x \(1 \+ queuePerTeam 1024\)"):
        run_objects(cfg, big)
    run_objects(variant(SHARED, {"workloads": {"reward": {"queuePerTeam": 2048}}}), big)
