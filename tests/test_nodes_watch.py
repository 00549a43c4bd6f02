"""The watcher re-tests a node only for the preflight findings that are the node's: each finding below is
what the preflight's own check prints (``workloads/pod/preflight.py``, called here in a failing state), so
``nodes.watch.NODE_FAULTS`` cannot drift from the texts it reads."""

from __future__ import annotations

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
    }


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
                                     "ofi plugin", "gin plugin", "reboot"])
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
        budgets = [o for o in objects if o.get("kind") == "PodDisruptionBudget" and o["spec"].get("maxUnavailable") == 0]
        assert budgets and all(b["spec"].get("unhealthyPodEvictionPolicy") == "AlwaysAllow" for b in budgets), stack
