"""IaC scan of the Kubernetes objects a stack emits: render them (``policy/render.py``), scan
them with checkov, and compare the findings with the reviewed justifications.

    python -m policy.scan [--stack p5en-prod] [--checkov PATH] [--keep DIR]

Exit 0 when every finding is justified and every justification still matches a finding; 1
otherwise, listing new findings (fix them or justify them in
``policy/checkov-justifications.yaml``) and stale justifications (delete them). checkov needs
its own virtualenv (checkov 3.3.30 wants packaging<24, pulumi 3.272 packaging>=26):
``policy/scan.sh`` creates it and runs this module.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
JUSTIFICATIONS = Path(__file__).resolve().parent / "checkov-justifications.yaml"
CHECKOV_VERSION = "3.3.30"
CACHE_VENV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "moe-rl-platform" / f"checkov-{CHECKOV_VERSION}"
CHECK_ID = re.compile(r"^CKV2?_K8S_\d+$")


@dataclass(frozen=True, order=True)
class Finding:
    check: str
    resource: str

    def __str__(self) -> str:
        return f"{self.check} {self.resource}"


def checkov_binary(explicit: str | None = None) -> str | None:
    """``--checkov``/$CHECKOV, the virtualenv ``policy/scan.sh`` creates, or ``checkov`` on PATH."""
    for candidate in (explicit, os.environ.get("CHECKOV"), str(CACHE_VENV / "bin" / "checkov")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("checkov")


def run_checkov(directory: Path, binary: str) -> list[Finding]:
    """Failed checks of ``checkov -d DIR --framework kubernetes --skip-download --quiet -o json``."""
    proc = subprocess.run([binary, "-d", str(directory), "--framework", "kubernetes", "--skip-download",
                           "--quiet", "-o", "json"], capture_output=True, text=True, timeout=600)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"checkov exited {proc.returncode}: {proc.stderr[-2000:]}")
    reports = json.loads(proc.stdout or "[]")
    reports = reports if isinstance(reports, list) else [reports]
    if any(r.get("summary", {}).get("parsing_errors") for r in reports):
        raise RuntimeError(f"checkov could not parse some manifests: {proc.stdout[:2000]}")
    return sorted({Finding(f["check_id"], f["resource"]) for r in reports
                   for f in r.get("results", {}).get("failed_checks", [])})


def load_justifications(path: Path = JUSTIFICATIONS) -> dict[Finding, str]:
    """Each justified (check, resource) with its reason."""
    doc = yaml.safe_load(path.read_text()) or {}
    out: dict[Finding, str] = {}
    for entry in doc.get("justified") or []:
        for resource in entry["resources"]:
            finding = Finding(entry["check"], resource)
            if finding in out:
                raise ValueError(f"{finding} is justified twice in {path.name}")
            out[finding] = entry["reason"]
    return out


def scan(stack: str, binary: str, keep: Path | None = None) -> list[Finding]:
    """Render ``stack``'s Kubernetes objects and return checkov's findings."""
    sys.path.insert(0, str(ROOT))
    import program
    from analysis import mocks
    from policy.render import write
    from workloads.checks import gate

    cfg = gate.read(stack)
    graph = mocks.run(lambda: program.build(cfg), region=cfg.region, stack=stack)
    with tempfile.TemporaryDirectory(prefix=f"k8s-{stack}-") as tmp:
        directory = keep or Path(tmp)
        write(graph, directory)
        return run_checkov(directory, binary)


def compare(findings: list[Finding], justified: dict[Finding, str]) -> tuple[list[Finding], list[Finding]]:
    """(findings nobody justified, justifications no finding matches)."""
    found = set(findings)
    return sorted(found - set(justified)), sorted(set(justified) - found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", default="p5en-prod")
    parser.add_argument("--checkov", help="checkov executable (default: $CHECKOV, scan.sh's virtualenv, PATH)")
    parser.add_argument("--keep", type=Path, help="write the rendered manifests here and keep them")
    args = parser.parse_args(argv)
    binary = checkov_binary(args.checkov)
    if binary is None:
        print("checkov not found: run policy/scan.sh, or pass --checkov", file=sys.stderr)
        return 2
    findings = scan(args.stack, binary, args.keep)
    new, stale = compare(findings, load_justifications())
    print(f"{args.stack}: {len(findings)} checkov findings, {len(findings) - len(new)} justified, "
          f"{len(new)} new, {len(stale)} stale justifications")
    for f in new:
        print(f"  NEW   {f}  -> fix it, or justify it in {JUSTIFICATIONS.relative_to(ROOT)}")
    for f in stale:
        print(f"  STALE {f}  -> no longer found: delete it from {JUSTIFICATIONS.relative_to(ROOT)}")
    return 1 if new or stale else 0


if __name__ == "__main__":
    sys.exit(main())
