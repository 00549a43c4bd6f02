"""Validate custom resources offline against a CRD's ``openAPIV3Schema``.

``jsonschema`` checks types, enums, patterns and required fields. A structural schema does not
reject unknown fields (the API server prunes them silently, which is worse), so ``unknown_fields``
also reports every field the schema does not declare, as ``kubectl --validate=strict`` would;
``x-kubernetes-preserve-unknown-fields`` and ``additionalProperties`` are honoured.

The schemas are the structural part of the pinned upstream CRDs, kept in ``workloads/schemas/crds`` with their
origin (``scripts/vendor_schemas.py`` regenerates them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import json

import jsonschema

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
CRD_FILES = {
    ("ray.io/v1", "RayCluster"): "ray.io_rayclusters.json",
    ("ray.io/v1", "RayJob"): "ray.io_rayjobs.json",
    ("scheduling.volcano.sh/v1beta1", "Queue"): "scheduling.volcano.sh_queues.json",
    ("batch.volcano.sh/v1alpha1", "Job"): "batch.volcano.sh_jobs.json",
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): "scheduling.volcano.sh_podgroups.json",
    ("topology.volcano.sh/v1alpha1", "HyperNode"): "topology.volcano.sh_hypernodes.json",
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "leaderworkerset.x-k8s.io_leaderworkersets.json",
}
"""(apiVersion, kind) -> the vendored CRD file in ``workloads/schemas/crds``."""


def crd_document(api_version: str, kind: str) -> dict:
    return json.loads((SCHEMAS / "crds" / CRD_FILES[(api_version, kind)]).read_text())


def crd_schema(api_version: str, kind: str) -> dict:
    """The ``openAPIV3Schema`` of ``kind`` at the version ``api_version`` names."""
    doc = crd_document(api_version, kind)
    version = api_version.rsplit("/", 1)[1]
    try:
        return doc["versions"][version]
    except KeyError:
        raise KeyError(f"{CRD_FILES[(api_version, kind)]} serves no version {version}") from None


def unknown_fields(obj: Any, schema: dict, where: str = "") -> list[str]:
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    out: list[str] = []
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for k, v in obj.items():
            if props is not None and k in props:
                out += unknown_fields(v, props[k], f"{where}.{k}")
            elif isinstance(extra, dict):
                out += unknown_fields(v, extra, f"{where}.{k}")
            elif props is not None and extra is not True:
                out.append(f"{where}.{k}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(obj):
            out += unknown_fields(v, schema["items"], f"{where}[{i}]")
    return out


def validate(obj: dict, schema: dict) -> list[str]:
    """Every schema error and unknown field of ``obj`` (empty when it is valid)."""
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj)]
    return errors + [f"{f}: unknown field" for f in unknown_fields(obj, schema)]
