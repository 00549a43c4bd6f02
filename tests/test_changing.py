"""The four typical changes of docs/changing.md (a family, a profile, a fault kind, an admission rule):
each one made on a copy, in this process (the data loader pointed at an extended copy of its file, the
repository untouched), takes effect end to end; and the page names exactly the files the code reads.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import inspect
import re
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from test_admission import refused, run_pods
from test_workloads import variant

import catalog
import components.faults as engine
import stackconfig.faults as faults
import software
import workloads.checks.flags as flags
from analysis.rules import tenancy
from analysis.rules.view import NAMESPACE, NETWORK_POLICY, NODE_GROUP, PRIORITY_CLASS, VAP, VAP_BINDING, Resource, Stack
from analysis import mocks
from bench.experiment import parse_experiment
from bench.faults import Injector
from bench.report import write_report
from bench.simulate import EXAMPLE_TRUTH, simulate
from stackconfig.files import PROJECT, raw_stack
from stackconfig.stack import CONFIG_KEY, POOL_LABEL, ROLE_LABEL
from workloads.checks.runs import load_run
from workloads.cli.runs import main as runs_main
from workloads.deploy.submit import run_objects
from workloads.derive.model import derive
from workloads.render import admission, pod_rules
from workloads.render.runs import priority_classes
from workloads.schema.teams import TEAM_LABEL

DOC = ROOT / "docs" / "changing.md"
_spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "scripts" / "gen_reference.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)
SHARED = "p5en-shared"
DIGEST = "sha256:" + "ab" * 32


def rel(path: Path | str) -> str:
    return Path(path).resolve().relative_to(ROOT).as_posix()


def regenerated(section: str) -> None:
    """The generated files the change leaves stale are the ones the page's section says to regenerate."""
    named = [p for p in sections()[section].get("Regenerate", []) if "/" in p and " " not in p]
    assert sorted(p.as_posix() for p in gen.stale(ROOT)) == sorted(named)


@pytest.fixture
def extend(tmp_path, monkeypatch):
    """``extend(module, entry, *cached)``: ``module.DATA`` pointed at a copy of its file with ``entry`` added,
    the ``cached`` loaders cleared now and again when the test ends (the catalog as shipped comes back)."""
    caches = []

    def extend_(module, entry: dict, *cached) -> None:
        rows = yaml.safe_load(module.DATA.read_text()) | entry
        path = tmp_path / module.DATA.name
        path.write_text(yaml.safe_dump(rows, sort_keys=False))
        monkeypatch.setattr(module, "DATA", path)
        caches.extend(cached)
        for c in cached:
            c.cache_clear()
    yield extend_
    monkeypatch.undo()
    for c in caches:
        c.cache_clear()


# --- a software profile ----------------------------------------------------------------------------

def test_a_new_profile_is_listed_planned_and_rendered(tmp_path, extend):
    entry = example("A software profile", "yaml")
    (name, row), = entry.items()
    extend(software, entry, software.profiles, flags.profile_flags)
    out: list[str] = []
    assert runs_main(["profiles"], out=out.append) == 0
    assert f"{name}: {row['summary']}" in out
    out.clear()
    assert runs_main(["profiles", name, "--build"], out=out.append) == 0
    assert f'-t "$REPO:{row["image"]["tag"]}"' in out[0] and f"-f {row['image']['recipe']}" in out[0]
    regenerated("A software profile")
    # a run naming it, on the shared stack (which pins every image it runs by digest)
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    raw = raw_stack(SHARED)
    raw["versions"]["software"]["images"][name] = f"{{imageRepository}}:{row['image']['tag']}@{DIGEST}"
    (stacks / f"Pulumi.{SHARED}.yaml").write_text(yaml.safe_dump({"config": {f"{PROJECT}:{CONFIG_KEY}": raw}}))
    run = next(r for f in sorted((ROOT / "runs").glob("*.yaml")) if software.profile(
        (r := yaml.safe_load(f.read_text())).get("software", software.DEFAULT_PROFILE)).framework == row["framework"])
    run["software"] = name  # a shipped run file of the same framework, on the new profile
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(run))
    argv = [SHARED, str(tmp_path / "run.yaml"), "--stack-dir", str(stacks)]
    assert runs_main(["plan", *argv], out=out.append) == 0
    out.clear()
    assert runs_main(["submit", *argv, "--dry-run", "--repository", "r.example/rl"], out=out.append) == 0
    job = yaml.safe_load(out[1])
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head["image"] == f"r.example/rl:{row['image']['tag']}@{DIGEST}"
    # and the run is held to what the profile's versions can do, naming it
    (tmp_path / "v2.yaml").write_text(yaml.safe_dump(run | {"deepep": {"version": "v2"}}))
    with pytest.raises(ValueError, match=rf"v2 is not available with software {re.escape(name)}"):
        load_run(tmp_path / "v2.yaml")


# --- a fault kind ----------------------------------------------------------------------------------

def test_every_fault_kind_hits_a_worker_group_the_rayjob_has():
    job = run_objects(variant(SHARED, {}), load_run(ROOT / "runs" / "grpo-qwen3-30b.yaml")).rayjob
    groups = {g["groupName"] for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]}
    assert {k.group for k in faults.fault_kinds().values()} <= groups


class _FIS:
    """The stack's templates as ``FaultEngine`` creates them, listed by their tags."""

    def __init__(self):
        self.specs = engine.template_specs("c", [("alpha", "team-alpha")])

    def list_experiment_templates(self, **_):
        return {"experimentTemplates": [{"id": k, "tags": tags} for k, (_, tags) in self.specs.items()]}


def test_a_new_fault_kind_is_accepted_created_aimed_and_simulated(tmp_path, extend):
    entry = example("A fault kind", "yaml")
    (kind, row), = entry.items()
    extend(faults, entry, faults.fault_kinds)
    exp = yaml.safe_load((ROOT / "experiments" / "example-ab.yaml").read_text())
    exp["arms"][2]["faults"].append({"kind": kind, "atStep": 20})
    assert parse_experiment(exp, "x.yaml").arm("deepep-v1-faults").faults[-1].spec.group == row["group"]
    graph = mocks.run(lambda: engine.FaultEngine("c", "arn:aws:eks:us-east-1:123456789012:cluster/c",
                                                 [("alpha", "team-alpha")]), region="us-east-1", stack="t")
    templates = {r.name: r.inputs for r in graph.of_type("aws:fis/experimentTemplate:ExperimentTemplate")}
    assert templates[f"c-faults-{kind}"]["tags"]["rl.platform/fault"] == kind
    assert f"c-faults-alpha-{kind}" not in templates  # a node fault is the operators', not a team's
    start = next(st for st in engine.node_policy_statements("c") if "fis:StartExperiment" in st["Action"])
    assert start["Condition"]["StringEquals"]["aws:ResourceTag/rl.platform/fault"] == sorted(["terminate-gpu-node", kind])
    assert Injector(_FIS(), None, "c").template(kind, "alpha") == kind
    regenerated("A fault kind")
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(exp))
    simulate(tmp_path / "exp.yaml", EXAMPLE_TRUTH, tmp_path / "sim")
    figures = write_report(tmp_path / "sim", plots=False)["faults"]["deepep-v1-faults"]["deepep-v1-faults/r1"]
    figure, = (f for f in figures if f["kind"] == kind)  # the run's first reaction, that long after the kill
    assert figure["run_detection_s"] == row["simulated"]["detectedAfterSeconds"]
    exp["arms"][2]["faults"][-1]["kind"] = "unplug-trainer"
    with pytest.raises(ValueError, match=f"'unplug-trainer' is not a fault kind.*{kind}"):
        parse_experiment(exp, "x.yaml")


# --- an admission rule -----------------------------------------------------------------------------

def _recorded(cfg, m) -> Stack:
    """What the program registers for team isolation (its admission objects, run priorities, node groups,
    a team namespace with its default deny), as the offline plan's team-isolation rule sees it."""
    def res(type_: str, name: str, props: dict) -> Resource:
        return Resource(type_, name, f"urn:{name}", copy.deepcopy(props))
    out = [res(VAP if o["kind"] == "ValidatingAdmissionPolicy" else VAP_BINDING, f"{o['kind']}-{o['metadata']['name']}", o)
           for o in admission.team_admission(m)]
    out += [res(PRIORITY_CLASS, pc["metadata"]["name"], pc) for pc in priority_classes(m)]
    out += [res(NODE_GROUP, p.name, {"labels": {POOL_LABEL: p.name, ROLE_LABEL: p.role.value}}) for p in cfg.pools]
    out += [res(NAMESPACE, "team-alpha", {"metadata": {"name": "team-alpha", "labels": {TEAM_LABEL: "alpha"}}}),
            res(NETWORK_POLICY, "deny", {"metadata": {"namespace": "team-alpha"},
                                         "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}})]
    return Stack(out)


def test_a_new_admission_rule_is_rendered_enforced_and_checked(monkeypatch):
    rule = example("An admission rule", "python")
    cfg = variant(SHARED, {})
    m = derive(cfg)
    before = _recorded(cfg, m)
    assert list(tenancy.check_team_isolation(before)) == []
    original = admission.pod_rules
    monkeypatch.setattr(admission, "pod_rules", lambda classes: [*original(classes), rule])
    pods = {o["metadata"]["name"]: o for o in admission.team_admission(m) if o["kind"] == "ValidatingAdmissionPolicy"}
    policy = pods[admission.POD_POLICY]
    assert {"expression": f"variables.unchanged || ({rule[0]})", "message": rule[1]} in policy["spec"]["validations"]
    trainer = run_pods(run_objects(cfg, load_run(ROOT / "runs" / "grpo-qwen3-30b.yaml")).rayjob)[1]
    assert refused(policy, trainer) == []  # what the platform makes still passes
    shared = copy.deepcopy(trainer)
    shared["spec"]["shareProcessNamespace"] = True  # what the page's example refuses
    assert refused(policy, shared) == [rule[1]]
    regenerated("An admission rule")
    # the offline plan's team-isolation rule expects it: a stack recorded without it has lost it
    pod_policy = f"ValidatingAdmissionPolicy-{admission.POD_POLICY}"
    assert list(tenancy.check_team_isolation(before)) == [
        (f"urn:{pod_policy}", f"ValidatingAdmissionPolicy {pod_policy}: lost the check(s): {rule[1]}")]
    assert list(tenancy.check_team_isolation(_recorded(cfg, m))) == []


# --- the page names exactly what the code reads ----------------------------------------------------

def sections_text() -> dict[str, str]:
    """The page's ``## `` sections, by title."""
    parts = re.split(r"^## ", DOC.read_text(), flags=re.M)[1:]
    return {title.strip(): body for title, _, body in (p.partition("\n") for p in parts)}


def example(section: str, language: str):
    """The first ``language`` code block of the page's ``section``: the change as the page shows it."""
    block = re.search(rf"```{language}\n(.*?)```", sections_text()[section], flags=re.S).group(1)
    return yaml.safe_load(block) if language == "yaml" else ast.literal_eval(block.strip().rstrip(","))


def sections() -> dict[str, dict[str, list[str]]]:
    """Per section of the page: its ``**Label:**`` lines, each as the backticked paths on it."""
    return {title: {label: re.findall(r"`([^`]+)`", rest)
                    for label, rest in re.findall(r"^\*\*([\w ]+):\*\* (.*)$", body, flags=re.M)}
            for title, body in sections_text().items()}


def test_the_page_names_exactly_the_files_each_change_touches():
    s = sections()
    assert set(s) == {"An instance family", "A software profile", "A fault kind", "An admission rule"}
    assert s["A software profile"]["Touch"] == [rel(software.DATA)]
    assert set(s["A software profile"]["Read from its entry"]) == {rel(flags.SCHEMAS) + "/", software.BUILD_CONTEXT + "/"}
    assert s["A fault kind"]["Touch"] == [rel(faults.DATA)]
    assert s["An admission rule"]["Touch"] == [rel(inspect.getsourcefile(pod_rules))]
    assert admission.pod_rules is pod_rules.pod_rules  # the policy reads the page's list
    assert tenancy.admission_policies is admission.admission_policies  # the check reads the same rules
    assert s["An instance family"]["Touch"] == [rel(catalog.DATA_DIR / catalog.FACTS_FILE)]
