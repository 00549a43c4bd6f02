"""IaC scan of the Kubernetes objects the program emits for p5en-prod: the rendered manifests,
the reviewed justifications file, and (marked ``contract``: checkov's own code in its own
virtualenv, run by the contract stage) the exact set of checkov findings, so a new finding or a
stale justification fails."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml
from conftest import ROOT, graph_of

from analysis.rules.view import leaves
from policy.render import manifests, resource_id, write
from policy.scan import CHECK_ID, JUSTIFICATIONS, checkov_binary, compare, load_justifications, run_checkov

STACK = "p5en-prod"


def test_every_kubernetes_object_is_rendered_except_helm_releases():
    graph = graph_of(STACK)
    objects = [r for r in graph.resources if r.type.startswith("kubernetes:")
               and not r.type.startswith(("kubernetes:helm.sh/", "pulumi:providers:"))]
    rendered = manifests(graph)
    top_level = [m for m in rendered if not (m["kind"] == "Pod" and m["apiVersion"] == "v1")]
    assert len(top_level) == len(objects) > 0
    for m in rendered:
        assert m["apiVersion"] and m["kind"] and m["metadata"]["name"]
        assert not any(isinstance(v, float) and v.is_integer() for v in leaves(m)), resource_id(m)


def test_ray_pod_templates_are_scanned_as_pods():
    rendered = manifests(graph_of(STACK))
    clusters = [m for m in rendered if m["kind"] == "RayCluster"]
    pods = {m["metadata"]["name"]: m for m in rendered if m["kind"] == "Pod"}
    for rc in clusters:
        groups = ["head"] + [g["groupName"] for g in rc["spec"]["workerGroupSpecs"]]
        for group in groups:
            pod = pods[f"{rc['metadata']['name']}-{group}"]
            assert pod["spec"]["containers"] and pod["metadata"]["namespace"] == rc["metadata"]["namespace"]


def test_manifests_are_written_as_yaml(tmp_path):
    files = write(graph_of(STACK), tmp_path)
    assert files and all(yaml.safe_load(f.read_text())["kind"] for f in files)


def test_justifications_are_reviewed_entries():
    doc = yaml.safe_load(JUSTIFICATIONS.read_text())
    assert doc["stack"] == STACK and doc["checkov"] == "3.3.30"
    for entry in doc["justified"]:
        assert CHECK_ID.match(entry["check"]), entry
        # Fixed findings are gone from the file; what is left is accepted with its reason.
        assert entry["status"] == "accepted" and "fix" not in entry, entry
        assert entry["resources"] and all(re.match(r"^[A-Za-z]+\.[a-z0-9-]+\.", r) for r in entry["resources"])
        assert len(entry["reason"]) >= 20, entry
        assert not re.search(r"\b(should|todo|revisit|untested|until|later|will be)\b", entry["reason"], re.I), \
            f"a reason states why the setting is needed, not a plan: {entry}"
    assert load_justifications()  # no (check, resource) justified twice


def _checkov() -> str:
    """checkov in its own virtualenv, created once by ``policy/scan.sh --install-only`` (its pins
    conflict with pulumi's, so it cannot live in requirements.txt)."""
    binary = checkov_binary()
    if binary is None:
        done = subprocess.run(["bash", str(ROOT / "policy" / "scan.sh"), "--install-only"],
                              capture_output=True, text=True, timeout=900)
        binary = checkov_binary()
        if binary is None:
            pytest.skip(f"checkov could not be installed (no package registry?): {done.stderr.strip()[-300:]}")
    return binary


@pytest.mark.contract
def test_scan_finds_exactly_the_justified_findings(tmp_path):
    binary = _checkov()
    write(graph_of(STACK), tmp_path)
    new, stale = compare(run_checkov(tmp_path, binary), load_justifications())
    assert not new, "new checkov findings (fix them or justify them in policy/checkov-justifications.yaml):\n" + \
        "\n".join(map(str, new))
    assert not stale, "justified findings checkov no longer reports (delete them):\n" + "\n".join(map(str, stale))


def test_scan_script_pins_the_checked_version():
    text = (ROOT / "policy" / "requirements-scan.txt").read_text()
    assert "checkov==3.3.30" in text
