"""Validate custom resources offline against a CRD's ``openAPIV3Schema``.

``jsonschema`` checks types, enums, patterns and required fields. A structural schema does not
reject unknown fields (the API server prunes them silently, which is worse), so ``unknown_fields``
also reports every field the schema does not declare, as ``kubectl --validate=strict`` would;
``x-kubernetes-preserve-unknown-fields`` and ``additionalProperties`` are honoured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml


def crd_schema(path: Path, version: str) -> dict:
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise KeyError(f"{path.name} has no version {version}")


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
