"""Stack and run files carry the schema version they are written for; another version is refused naming
the ones this release reads, and CHANGELOG.md has the current version's entry."""

from __future__ import annotations

import pytest
import yaml
from conftest import ROOT, raw_config

from stackconfig.base import SCHEMA_VERSION
from stackconfig.errors import BadInput
from stackconfig.stack import StackConfigError
from workloads.checks import gate
from workloads.checks.runs import load_run


def test_a_stack_of_another_version_is_refused_and_one_without_is_this_releases():
    raw = raw_config("p5en-prod")
    assert gate.load("p5en-prod", raw).schema_version == SCHEMA_VERSION
    with pytest.raises(StackConfigError, match=rf"schemaVersion: {SCHEMA_VERSION + 1} is not allowed; allowed: "
                                                rf"{SCHEMA_VERSION}"):
        gate.load("p5en-prod", {**raw, "schemaVersion": SCHEMA_VERSION + 1})


def test_a_run_file_of_another_version_is_refused(tmp_path):
    doc = yaml.safe_load((ROOT / "runs" / "grpo-qwen3-30b.yaml").read_text())
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({**doc, "schemaVersion": SCHEMA_VERSION}))
    assert load_run(path).schema_version == SCHEMA_VERSION
    path.write_text(yaml.safe_dump({**doc, "schemaVersion": SCHEMA_VERSION + 1}))
    with pytest.raises(BadInput, match=rf"{path}: schemaVersion: {SCHEMA_VERSION + 1} is not allowed"):
        load_run(path)


def test_the_changelog_has_the_current_versions_entry():
    assert f"## Schema version {SCHEMA_VERSION} (" in (ROOT / "CHANGELOG.md").read_text()
