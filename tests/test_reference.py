"""The reference pages (``docs/reference/``) and the editors' schema (``stack.schema.json``) say what the
code does: regenerated in memory they equal the committed files; the schema an editor uses accepts every
stack, run and experiment file the models accept and flags what they refuse; each field's docstring is its
description."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from conftest import ROOT

spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "scripts" / "gen_reference.py")
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)

PLATFORM = "moe-rl-platform:platform"


def test_the_generated_files_are_current():
    stale = gen.stale(ROOT)
    assert not stale, f"stale: {', '.join(map(str, stale))}; run `{gen.COMMAND}` and commit what it writes"


def test_a_changed_page_is_stale(tmp_path):
    for path, text in gen.render().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert gen.stale(tmp_path) == []
    page = tmp_path / gen.REFERENCE / "stack.md"
    page.write_text(page.read_text().replace("availabilityZone", "zone"))
    (tmp_path / gen.STACK_SCHEMA).unlink()
    assert gen.stale(tmp_path) == [gen.REFERENCE / "stack.md", gen.STACK_SCHEMA]


def validator(model: type) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(model.model_json_schema(by_alias=True))


def stack_files() -> list[Path]:
    return sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))


@pytest.fixture(scope="module")
def editor() -> jsonschema.Draft202012Validator:
    schema = json.loads((ROOT / gen.STACK_SCHEMA).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", stack_files(), ids=lambda p: p.name)
def test_the_editor_schema_accepts_every_stack_file(editor, path):
    doc = yaml.safe_load(path.read_text())
    problems = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in editor.iter_errors(doc)]
    assert not problems, problems


@pytest.mark.parametrize("change,where", [
    (lambda p: p.update(colour="blue"), ""),  # an unknown key
    (lambda p: p["pools"][0].update(nodes=0), "pools.0.nodes"),  # below the fixed size's bound
    (lambda p: p["pools"][0].update(nodes={"min": 1, "desired": 1}), "pools.0.nodes"),  # max missing
    (lambda p: p["pools"][0]["capacity"].update(type="RESERVED"), "pools.0.capacity.type"),  # not an enum value
    (lambda p: p.update(stack="x"), ""),  # set from the file name, never written
])
def test_the_editor_schema_flags_what_the_model_refuses(editor, change, where):
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.p5en-shared.yaml").read_text())
    doc["config"][PLATFORM]["pools"][0].setdefault("capacity", {"type": "ON_DEMAND"})
    assert not list(editor.iter_errors(doc))
    changed = copy.deepcopy(doc)
    change(changed["config"][PLATFORM])
    found = [".".join(map(str, e.absolute_path)) for e in editor.iter_errors(changed)]
    assert f"config.{PLATFORM}{'.' + where if where else ''}" in found, found


def test_every_run_and_experiment_file_matches_its_schema():
    from bench.experiment import Experiment
    from workloads.schema.run import RunFile
    for model, folder in ((RunFile, "runs"), (Experiment, "experiments")):
        check = validator(model)
        for path in sorted((ROOT / folder).glob("*.yaml")):
            problems = [e.message for e in check.iter_errors(yaml.safe_load(path.read_text()))]
            assert not problems, (path, problems)


def test_each_field_docstring_is_its_description():
    """The schema reads each field's docstring when it is made (not at import): every field of every model
    of the stack file has it as its description, under its YAML key, as pydantic's own reader of field
    docstrings (``use_attribute_docstrings``) finds them."""
    from pydantic._internal._docs_extraction import extract_docstrings_from_cls
    from stackconfig.base import SchemaModel
    from workloads.schema.stack import ProgramConfig

    def models(cls: type) -> set[type]:
        found = {cls}
        for field in cls.model_fields.values():
            for arg in [field.annotation, *getattr(field.annotation, "__args__", ())]:
                if isinstance(arg, type) and issubclass(arg, SchemaModel) and arg not in found:
                    found |= models(arg)
        return found

    classes = models(ProgramConfig)
    written = {(cls.__name__, name): text for cls in classes
               for name, text in extract_docstrings_from_cls(cls, use_inspect=True).items()}
    assert written
    schema = ProgramConfig.model_json_schema(by_alias=True)
    defs = {**schema["$defs"], ProgramConfig.__name__: schema}
    described = {(cls.__name__, name): defs[cls.__name__]["properties"][f.alias or name].get("description")
                 for cls in classes for name, f in cls.model_fields.items() if (cls.__name__, name) in written}
    assert described == written
    pages = "".join((ROOT / gen.REFERENCE / page).read_text() for page in ("stack.md", "run-file.md"))
    missing = [key for key, text in written.items() if gen._cell(text) not in pages]
    assert not missing, missing
