"""Render the Kubernetes objects a stack's program registers as YAML manifests for the IaC scan.

Objects come from the recorded graph (``analysis.mocks``): every ``kubernetes:*`` resource except
Helm releases (their charts are third-party and pinned in ``components/versions.py``) and
providers, with the inputs the program gave them, which for these resources are the manifest
(apiVersion, kind, metadata, spec/data). Numbers come back from the engine as floats; integral
ones are written as integers, as the program wrote them.

Custom resources whose pods the scanner does not understand (a RayCluster's head and worker
groups) are also written as one ``Pod`` per embedded pod template, named
``<object>-<group>``, so the pod checks (privileges, capabilities, probes, resources) reach them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import yaml

from analysis.mocks import Graph

SKIPPED_PREFIXES = ("kubernetes:helm.sh/", "pulumi:providers:")
SECRET_SIG = "4dabf18193072939515e22adb298388d"


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        if SECRET_SIG in value:
            return _clean(value.get("value"))
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _pod_templates(obj: dict) -> Iterator[tuple[str, dict]]:
    """(group, pod template) embedded in custom resources the scanner has no model for."""
    spec = obj.get("spec") or {}
    if obj.get("kind") in ("RayCluster", "RayJob", "RayService"):
        cluster = spec.get("rayClusterSpec") or spec.get("rayClusterConfig") or spec
        head = (cluster.get("headGroupSpec") or {}).get("template")
        if head:
            yield "head", head
        for group in cluster.get("workerGroupSpecs") or []:
            if group.get("template"):
                yield group.get("groupName", "worker"), group["template"]


def manifests(graph: Graph) -> list[dict]:
    """Every Kubernetes object of the graph as a manifest, plus the pods of its Ray custom resources."""
    out = []
    for r in graph.resources:
        if not r.type.startswith("kubernetes:") or r.type.startswith(SKIPPED_PREFIXES):
            continue
        obj = _clean(r.inputs)
        if not obj.get("kind") or not obj.get("apiVersion"):
            continue
        out.append(obj)
        meta = obj.get("metadata") or {}
        for group, template in _pod_templates(obj):
            pod_meta = {**(template.get("metadata") or {}), "name": f"{meta.get('name')}-{group}"}
            if meta.get("namespace"):
                pod_meta["namespace"] = meta["namespace"]
            out.append({"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template.get("spec") or {}})
    return out


def resource_id(obj: dict) -> str:
    """The resource name checkov reports for a manifest: ``Kind.namespace.name``."""
    meta = obj.get("metadata") or {}
    return f"{obj['kind']}.{meta.get('namespace', 'default')}.{meta.get('name')}"


def write(graph: Graph, directory: Path) -> list[Path]:
    """One YAML file per manifest in ``directory``; returns the files."""
    directory.mkdir(parents=True, exist_ok=True)
    files = []
    for n, obj in enumerate(manifests(graph)):
        meta = obj.get("metadata") or {}
        path = directory / f"{n:02d}-{obj['kind'].lower()}-{meta.get('name')}.yaml"
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        files.append(path)
    return files
