"""Regenerate ``workloads/schemas/``: the structural part of upstream CRDs and the Miles flag list, as data.

Each output keeps what validation needs (types, enums, required fields, patterns, formats, list and
map markers) and drops all prose (``description``). It records where it came from: repository,
tag, commit, path and the git blob id of the upstream file, so a reader can fetch the exact bytes.

When a pin changes (chart version, Miles tag), fetch the upstream files at the new tag into one
folder, update ``UPSTREAM`` below and run::

    python scripts/vendor_schemas.py --source-dir /path/to/upstream-files

Files are looked up in the source folder by their base name.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "workloads" / "schemas"

KUBERAY = ("ray-project/kuberay", "v1.7.0", "59d663aeec13760646da3db9c1cf8cfe883e30b7")
VOLCANO = ("volcano-sh/volcano", "v1.15.1", "0a56ed331897f5455916a44d3075671376d731d6")
LWS = ("kubernetes-sigs/lws", "v0.10.0", "2161f38ff333f9e24d3c44adef7cd5d9787cac00")
MILES = ("radixark/miles", "v0.1.0", "78527b9102b3a5f15891128cbec3ac6c2dc4089e")

UPSTREAM = {
    # output file: (repository, tag, commit, upstream path)
    "crds/ray.io_rayclusters.json": (*KUBERAY, "helm-chart/kuberay-operator/crds/ray.io_rayclusters.yaml"),
    "crds/ray.io_rayjobs.json": (*KUBERAY, "helm-chart/kuberay-operator/crds/ray.io_rayjobs.yaml"),
    "crds/batch.volcano.sh_jobs.json": (*VOLCANO, "config/crd/volcano/bases/batch.volcano.sh_jobs.yaml"),
    "crds/scheduling.volcano.sh_queues.json": (*VOLCANO, "config/crd/volcano/bases/scheduling.volcano.sh_queues.yaml"),
    "crds/scheduling.volcano.sh_podgroups.json":
        (*VOLCANO, "config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml"),
    "crds/topology.volcano.sh_hypernodes.json":
        (*VOLCANO, "config/crd/volcano/bases/topology.volcano.sh_hypernodes.yaml"),
    "crds/leaderworkerset.x-k8s.io_leaderworkersets.json":
        (*LWS, "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"),
}
MILES_FLAGS = ("miles/v0.1.0-flags.json", "v0.1.0-flags.json")
"""(output, source file): the flag list read statically from Miles' sources at ``MILES``."""

PROSE = frozenset({"description", "example", "examples"})


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def structural(node):
    """``node`` without prose; everything that constrains a value is kept."""
    if isinstance(node, dict):
        return {k: structural(v) for k, v in node.items() if k not in PROSE}
    if isinstance(node, list):
        return [structural(v) for v in node]
    return node


def origin(repository: str, tag: str, commit: str, path: str, data: bytes) -> dict:
    return {"repository": repository, "tag": tag, "commit": commit, "path": path, "blob": git_blob_id(data)}


def vendor_crd(source: Path, repository: str, tag: str, commit: str, path: str) -> dict:
    data = source.read_bytes()
    crd = yaml.safe_load(data)
    return {
        "origin": origin(repository, tag, commit, path, data),
        "generated_by": "scripts/vendor_schemas.py",
        "group": crd["spec"]["group"],
        "kind": crd["spec"]["names"]["kind"],
        "scope": crd["spec"]["scope"],
        "versions": {v["name"]: structural(v["schema"]["openAPIV3Schema"])
                     for v in crd["spec"]["versions"] if v.get("served", True)},
    }


def vendor_miles_flags(source: Path) -> dict:
    """The flag names, types, defaults and choices, and the pass-through rules' data (no notes)."""
    d = json.loads(source.read_bytes())
    passthrough = d["sglang_passthrough"]
    return {
        "origin": {"repository": d["repository"], "tag": d["tag"], "commit": d["commit"],
                   "paths": d["sources"]},
        "generated_by": "scripts/vendor_schemas.py",
        "miles_flags": d["miles_flags"],
        "boolean_optional_negations": d["boolean_optional_negations"],
        "entry_points": d["entry_points"],
        "sglang_passthrough": {"prefix": passthrough["prefix"], "skipped": passthrough["skipped"],
                               "miles_defined_sglang_flags": passthrough["miles_defined_sglang_flags"],
                               "flags_used_in_miles_examples": passthrough["flags_used_in_miles_examples"]},
        "megatron": {"pinned": d["megatron"]["pinned"],
                     "flags_used_in_miles_examples": d["megatron"]["flags_used_in_miles_examples"]},
        "fsdp_backend_flags": {"flags": d["fsdp_backend_flags"]["flags"]},
    }


def write(rel: str, doc: dict) -> None:
    out = OUT / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {out.relative_to(ROOT)} ({out.stat().st_size:,} bytes)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source-dir", type=Path, required=True,
                        help="folder holding the upstream files at the tags in UPSTREAM")
    args = parser.parse_args()
    for rel, (repository, tag, commit, path) in UPSTREAM.items():
        write(rel, vendor_crd(args.source_dir / Path(path).name, repository, tag, commit, path))
    rel, name = MILES_FLAGS
    write(rel, vendor_miles_flags(args.source_dir / name))


if __name__ == "__main__":
    main()
