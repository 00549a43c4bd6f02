"""The EFA step's fault classes: a missing tool or provider is the image's (software); a device the
device plugin mounted into the pod that libfabric does not list is the node's hardware."""

from __future__ import annotations

import os

from test_nodes_agent import node_env, train_plan, _tool  # noqa: F401 - fixtures

from nodes import marks


def _verdict(node):
    labels, notes = node["metadata"]["labels"], node["metadata"]["annotations"]
    return labels[marks.RESULT_LABEL], labels.get(marks.FAULT_LABEL), notes.get(marks.REASON_ANNOTATION, "")


def _efa_only(plan):
    """The EFA step alone: the preflight's own EFA check (software) would fail first otherwise."""
    return {**plan, "steps": {**plan["steps"], "preflight": 0, "nccl": 0}}


def test_no_fi_info_in_the_image_is_software(node_env, train_plan, monkeypatch):
    bin_dir = node_env["results"].parent / "bin"
    (bin_dir / "fi_info").unlink()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    result, fault, reason = _verdict(node_env["run"](_efa_only(train_plan)).node)
    assert (result, fault) == ("failed", "software")
    assert "fi_info not found in the image" in reason


def test_no_efa_provider_in_libfabric_is_software(node_env, train_plan):
    # fi_info with no match: "fi_getinfo: -61 (No data available)", exit 61 (libfabric v2.6.0 util/info.c run, main)
    _tool(node_env["results"].parent / "bin", "fi_info", "#!/bin/sh\necho 'fi_getinfo: -61 (No data available)' >&2\nexit 61\n")
    result, fault, reason = _verdict(node_env["run"](_efa_only(train_plan)).node)
    assert (result, fault) == ("failed", "software")
    assert "libfabric lists no efa provider" in reason and "2 EFA devices mounted" in reason


def test_fi_info_that_never_answers_is_software_not_a_crash(node_env, train_plan, monkeypatch):
    from nodes import efa
    monkeypatch.setattr(efa, "FI_INFO_SECONDS", 0.5)
    _tool(node_env["results"].parent / "bin", "fi_info", "#!/bin/sh\nsleep 5\n")
    result, fault, reason = _verdict(node_env["run"](_efa_only(train_plan)).node)
    assert (result, fault) == ("failed", "software")
    assert "fi_info gave no answer within 0.5 s" in reason


def test_a_mounted_device_libfabric_does_not_list_is_hardware(node_env, train_plan):
    (node_env["devices"] / "uverbs2").write_text("")  # the device plugin mounted three
    result, fault, reason = _verdict(node_env["run"]({**_efa_only(train_plan), "efaDevices": 3}).node)
    assert (result, fault) == ("failed", "hardware")
    assert "libfabric lists 2 of the 3 EFA devices mounted into the pod" in reason


def test_fewer_devices_mounted_than_the_pod_asked_for_is_not_the_nodes_hardware(node_env, train_plan):
    result, fault, reason = _verdict(node_env["run"]({**_efa_only(train_plan), "efaDevices": 3}).node)
    assert (result, fault) == ("failed", "software")
    assert "2 EFA devices mounted into the pod, 3 requested" in reason


def test_no_device_mounted_is_software(node_env, train_plan):
    for f in os.listdir(node_env["devices"]):
        os.unlink(node_env["devices"] / f)
    result, fault, reason = _verdict(node_env["run"](_efa_only(train_plan)).node)
    assert (result, fault) == ("failed", "software")
    assert "0 EFA devices mounted into the pod, 2 requested" in reason
