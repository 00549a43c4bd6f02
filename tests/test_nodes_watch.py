"""The watcher re-tests a node only for the preflight findings that are the node's: each finding below is
what the preflight's own check prints (``workloads/pod/preflight.py``, called here in a failing state), so
``nodes.watch.NODE_FAULTS`` cannot drift from the texts it reads."""

from __future__ import annotations

import json
import subprocess

import pytest

from nodes import watch
from workloads.pod import preflight

NODE = "ip-10-0-1-5.ec2.internal"


def _network(net: str):
    """``check_nccl_network`` on a node where NCCL's one-rank probe picked ``net`` (its INFO line)."""
    def fake_run(*a, **kw):
        return subprocess.CompletedProcess(a[0], 0, stdout=f"[0] NCCL INFO Using network {net}\n", stderr="")
    return fake_run


def _timeout(*a, **kw):
    raise subprocess.TimeoutExpired(a[0], kw.get("timeout", 0))


def _unreadable(*a, **kw):
    raise OSError("no such file")


def _findings(monkeypatch, tmp_path) -> dict[str, tuple]:
    """Finding name -> (the check, is it the node's)."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi, no fi_info
    monkeypatch.setenv("NCCL_GIN_TYPE", "5")
    monkeypatch.setenv("NCCL_SYM_GIN_KERNELS_ENABLE", "0")
    monkeypatch.setattr(preflight.resource, "getrlimit", lambda r: (65536, 65536))
    monkeypatch.setattr(preflight, "has_cap_ipc_lock", lambda status: False)
    return {
        "gpus": (lambda: preflight.check_gpus(8), True),
        "efa": (lambda: preflight.check_efa(16), True),
        "memlock": (preflight.check_memlock, True),
        "hugepages": (lambda: preflight.check_hugepages(1 << 40), True),
        "gdrdrv": (preflight.check_gdrdrv, True),
        "driver option": (lambda: preflight.check_gda(params="NVreg_EnableGpuFirmware=18"), True),
        "driver params": (lambda: (monkeypatch.setattr(preflight, "open", _unreadable, raising=False),
                                   preflight.check_gda())[1], True),
        "nccl hangs": (lambda: (monkeypatch.setattr(preflight.subprocess, "run", _timeout),
                                preflight.check_nccl_network())[1], True),
        "shm": (lambda: preflight.check_shm(1 << 20), False),
        "nccl version": (lambda: preflight.check_nccl("99.0", "2.28.9"), False),
        "nccl unread": (lambda: preflight.check_nccl("2.28", None), False),
        "gin type": (lambda: preflight.check_gin_type("", "5"), False),
        "ofi plugin": (lambda: (monkeypatch.setenv("NCCL_NET_PLUGIN", "/nonexistent.so"),
                                preflight.check_ofi_plugin())[1], False),
        "gin plugin": (lambda: (monkeypatch.setenv("NCCL_NET_PLUGIN", "/nonexistent.so"),
                                preflight.check_gin_plugin())[1], False),
        "sockets": (lambda: (monkeypatch.setattr(preflight.subprocess, "run", _network("Socket")),
                             preflight.check_nccl_network())[1], True),
        "reboot": (lambda: _rebooted(tmp_path), True),
        "new pod after a reboot": (lambda: _new_pod_after_reboot(tmp_path), True),
    }


def _new_pod_after_reboot(tmp_path) -> str | None:
    """``check_boot`` in a pod made again after a reboot: no record, the node up 200 s."""
    boot, uptime = tmp_path / "boot_id", tmp_path / "uptime"
    boot.write_text("2a9c-second\n")
    uptime.write_text("200.31 3105.62\n")  # proc(5): seconds up, seconds idle
    return preflight.check_boot(str(tmp_path / "new-pod" / "boot"), str(boot), preflight.PASSED_UPTIME_SECONDS,
                                str(uptime))


def test_a_new_pod_on_a_node_up_for_less_than_any_burn_in_refuses_it_until_it_is_re_tested(tmp_path):
    """The pod the reboot deleted (its node unreachable too long) or failed at re-admission is made again with
    an empty volume: it is refused, and records nothing, so its next start is refused too; the same pod
    started again on the boot it recorded is not; a node up long enough passes a new pod."""
    boot, uptime, record = tmp_path / "boot_id", tmp_path / "uptime", tmp_path / "new-pod" / "boot"
    first = _new_pod_after_reboot(tmp_path)
    assert first.startswith("reboot: ") and not record.exists()
    assert _new_pod_after_reboot(tmp_path) == first
    uptime.write_text(f"{preflight.PASSED_UPTIME_SECONDS + 1}.0 9000.0\n")
    assert preflight.check_boot(str(record), str(boot), preflight.PASSED_UPTIME_SECONDS, str(uptime)) is None
    assert record.read_text() == "2a9c-second\n"
    uptime.write_text("30.0 10.0\n")  # a recorded boot is the pod's own: its uptime is not asked
    assert preflight.check_boot(str(record), str(boot), preflight.PASSED_UPTIME_SECONDS, str(uptime)) is None


def _rebooted(tmp_path) -> str | None:
    """``check_boot`` on its first boot, then after a reboot (another boot id)."""
    boot, record = tmp_path / "boot_id", tmp_path / "pod" / "boot"
    boot.write_text("1f0e-first\n")
    assert preflight.check_boot(str(record), str(boot)) is None
    assert preflight.check_boot(str(record), str(boot)) is None  # the init container again, same boot
    boot.write_text("2a9c-second\n")
    return preflight.check_boot(str(record), str(boot))


@pytest.mark.parametrize("finding", ["gpus", "efa", "memlock", "hugepages", "gdrdrv", "driver option", "driver params",
                                     "nccl hangs", "sockets", "shm", "nccl version", "nccl unread", "gin type",
                                     "ofi plugin", "gin plugin", "reboot", "new pod after a reboot"])
def test_only_the_nodes_own_findings_re_test_it(finding, monkeypatch, tmp_path):
    check, nodes = _findings(monkeypatch, tmp_path)[finding]
    problem = check()
    assert problem, finding
    message = f"preflight ok: gpus\npreflight FAILED on {NODE}: {problem}\n"
    assert (watch.node_fault(message) == problem) is nodes, problem


def test_a_run_pods_preflight_keeps_its_finding_for_the_watcher():
    """The kubelet keeps the preflight's last log lines as its termination message only when asked."""
    from conftest import graph_of
    from test_workloads_security import pod_specs, registered_objects
    found = [c for o in registered_objects(graph_of("p5en-prod")) for _, pod in pod_specs(o)
             for c in pod.get("initContainers") or [] if c["name"] == watch.PREFLIGHT_CONTAINER]
    assert found and all(c.get("terminationMessagePolicy") == "FallbackToLogsOnError" for c in found)


def test_a_run_pods_preflight_refuses_a_node_that_rebooted_under_it_and_its_budget_lets_it_go():
    """Every Ray pod's preflight keeps its first boot in the pod's own disk volume (kept across a reboot), and
    every budget over run pods lets a pod that is not Ready go (the refused preflight keeps it not Ready)."""
    from conftest import graph_of
    from test_workloads_security import pod_specs, registered_objects
    for stack in ("p5en-prod", "p5en-shared"):
        objects = registered_objects(graph_of(stack))
        pods = [pod for o in objects for _, pod in pod_specs(o)
                if any(c["name"] == watch.PREFLIGHT_CONTAINER for c in pod.get("initContainers") or [])]
        assert pods or stack == "p5en-shared", stack  # runs mode: the Ray pods come with each run's RayJob
        for pod in pods:
            init = next(c for c in pod["initContainers"] if c["name"] == watch.PREFLIGHT_CONTAINER)
            record = init["command"][init["command"].index("--boot-record") + 1]
            mount = next(m for m in init["volumeMounts"] if record.startswith(m["mountPath"] + "/"))
            volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
            assert volume == {"name": mount["name"], "emptyDir": {}}  # disk, not memory: it outlives a reboot
        budgets = [o for o in objects if o.get("kind") == "PodDisruptionBudget" and o["spec"].get("maxUnavailable") == 0
                   and (o["spec"]["selector"].get("matchLabels") or {}).get("ray.io/node-type") != "head"]
        assert budgets and all(b["spec"].get("unhealthyPodEvictionPolicy") == "AlwaysAllow" for b in budgets), stack


def test_the_heads_budget_never_lets_a_head_that_is_not_ready_go():
    """The head carries no boot check and the run dies with it: its budget keeps IfHealthyBudget, which lets a
    not-Ready pod go only while the budget is healthy (kubernetes v1.35.3 eviction.go:246-251), never with one
    head and maxUnavailable 0; workers' budgets let a not-Ready one go (the burn-in's re-test)."""
    from conftest import graph_of
    from test_workloads_security import registered_objects
    budgets = {o["metadata"]["name"]: o["spec"] for o in registered_objects(graph_of("p5en-prod"))
               if o.get("kind") == "PodDisruptionBudget" and o["spec"]["selector"].get("matchLabels", {}).get("ray.io/cluster")}
    head = next(b for b in budgets.values() if b["selector"]["matchLabels"]["ray.io/node-type"] == "head")
    assert head["maxUnavailable"] == 0 and head["unhealthyPodEvictionPolicy"] == "IfHealthyBudget"
    assert len(budgets) > 1 and all(b["unhealthyPodEvictionPolicy"] == "AlwaysAllow" for b in budgets.values()
                                    if b["selector"]["matchLabels"]["ray.io/node-type"] == "worker")


def test_a_gpu_run_pod_outlasts_a_reboot_on_its_node_and_a_new_one_is_held_to_the_burn_ins_uptime():
    """Every Ray GPU pod tolerates its node not ready or unreachable for ``NODE_DOWN_SECONDS`` (the API server
    would give it 300 s), and its preflight refuses a node up for less than the burn-in's own hold (one value:
    the agent's plan says the same); with the burn-in off, nothing re-tests a node, so no pod asks it."""
    from conftest import graph_of
    from test_workloads import variant_graph
    from test_workloads_security import pod_specs, registered_objects

    from workloads.render.ray import NODE_DOWN_SECONDS

    def gpu_pods(objects):
        return [pod for o in objects for _, pod in pod_specs(o)
                if any(c["name"] == watch.PREFLIGHT_CONTAINER for c in pod.get("initContainers") or [])]

    assert NODE_DOWN_SECONDS > 300
    objects = registered_objects(graph_of("p5en-prod"))
    agents = [c for o in objects if o["kind"] == "DaemonSet" for _, pod in pod_specs(o)
              for c in pod["containers"] if c["name"] == "agent"]
    for agent in agents:  # the reward pool's steps alone take less than the hold
        plan = json.loads(agent["command"][agent["command"].index("--plan") + 1])
        assert plan["passedUptimeSeconds"] == preflight.PASSED_UPTIME_SECONDS <= plan["budgetSeconds"], plan["pool"]
    assert len(agents) == 3
    pods = gpu_pods(objects)
    assert pods
    for pod in pods:
        init = next(c for c in pod["initContainers"] if c["name"] == watch.PREFLIGHT_CONTAINER)
        assert init["command"][init["command"].index("--min-uptime") + 1] == str(plan["passedUptimeSeconds"])
        down = {t["key"]: t for t in pod["tolerations"] if t.get("effect") == "NoExecute"}
        assert {k: (t["operator"], t["tolerationSeconds"]) for k, t in down.items()} == {
            "node.kubernetes.io/not-ready": ("Exists", NODE_DOWN_SECONDS),
            "node.kubernetes.io/unreachable": ("Exists", NODE_DOWN_SECONDS)}
    off = gpu_pods(registered_objects(variant_graph("p5en-prod", {"burnIn": {"enabled": False}})))
    assert off and not any("--min-uptime" in c["command"] for pod in off for c in pod["initContainers"])
