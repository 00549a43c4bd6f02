"""Golden snapshots of what the reference stacks render, kept under ``tests/snapshots/<stack>/`` and
reviewed as diffs when they change (as eksctl keeps ``pkg/cfn/builder/testdata``): the launch templates
(user data decoded), the managed node groups, every IAM policy document (roles' trust and inline
policies, KMS key, bucket and VPC endpoint policies), the Ray objects (the stack's RayCluster or RayJob,
and the RayJob ``runs submit`` makes of each run file under ``runs/`` the stack admits) and the
admission policies with their bindings.

    python scripts/gen_snapshots.py            # rewrite them; tests/test_snapshots.py fails while one differs

Each file is YAML with sorted keys, one document per kind, resources by name.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STACKS = ("p5en-prod", "p5en-shared")
FOLDER = ROOT / "tests" / "snapshots"
COMMAND = "python scripts/gen_snapshots.py"

IAM = {"aws:iam/role:Role": ("assumeRolePolicy",), "aws:iam/rolePolicy:RolePolicy": ("policy",),
       "aws:kms/keyPolicy:KeyPolicy": ("policy",), "aws:kms/key:Key": ("policy",),
       "aws:s3/bucketPolicy:BucketPolicy": ("policy",), "aws:ec2/vpcEndpointPolicy:VpcEndpointPolicy": ("policy",)}
KINDS = {"launch-templates": ("aws:ec2/launchTemplate:LaunchTemplate",), "node-groups": ("aws:eks/nodeGroup:NodeGroup",),
         "ray": ("kubernetes:ray.io/v1:RayCluster", "kubernetes:ray.io/v1:RayJob"),
         "admission": ("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy",
                       "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding")}


def _document(value):
    """A policy given as JSON text, parsed (its diff then reads statement by statement)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _launch_template(inputs: dict) -> dict:
    out = dict(inputs)
    if isinstance(out.get("userData"), str):
        out["userData"] = base64.b64decode(out["userData"]).decode()
    return out


def snapshot(stack: str, cfg, graph) -> dict[str, str]:
    """File name -> text of ``stack``'s snapshots, from its config and recorded graph."""
    docs: dict[str, dict] = {}
    for kind, types in KINDS.items():
        docs[kind] = {f"{r.type.rsplit(':', 1)[1]} {r.name}":
                      _launch_template(r.inputs) if kind == "launch-templates" else r.inputs
                      for t in types for r in graph.of_type(t)}
    docs["iam-policies"] = {f"{r.type.rsplit(':', 1)[1]} {r.name}": {k: _document(r.inputs.get(k)) for k in keys}
                            for t, keys in IAM.items() for r in graph.of_type(t)
                            if any(r.inputs.get(k) for k in keys)}
    docs["ray"] |= {f"RayJob of runs/{path.name}": job for path, job in _run_jobs(cfg)}
    return {f"{kind}.yaml": yaml.safe_dump(doc, sort_keys=True, width=120, allow_unicode=True)
            for kind, doc in sorted(docs.items())}


def _run_jobs(cfg):
    """(run file, the RayJob ``runs submit --dry-run`` prints) of each run file the stack admits."""
    from workloads.checks.runs import input_problems, load_run
    from workloads.deploy.submit import run_objects
    from workloads.schema.settings import Submission
    if cfg.workloads.submit is not Submission.RUNS:
        return []
    out = []
    for path in sorted((ROOT / "runs").glob("*.yaml")):
        run = load_run(path)
        if not input_problems(cfg, run):
            out.append((path, run_objects(cfg, run).rayjob))
    return out


def current(stack: str) -> dict[str, str]:
    from analysis.plan import record
    from workloads.checks import gate
    cfg = gate.read(stack, ROOT / "stacks")
    return snapshot(stack, cfg, record(cfg))


def main() -> None:
    for stack in STACKS:
        folder = FOLDER / stack
        folder.mkdir(parents=True, exist_ok=True)
        files = current(stack)
        for old in folder.glob("*.yaml"):
            if old.name not in files:
                old.unlink()
        for name, text in files.items():
            (folder / name).write_text(text)
            print(f"wrote {(folder / name).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
