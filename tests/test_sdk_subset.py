"""The plan's trimmed SDKs (analysis/sdk_subset.py): the program registers the same graph with them as with
the SDKs in full, the installed ``moe-rl plan`` uses them and loads a fraction of the SDKs' modules, the
scan finds a class however a file imports the SDK, and a name reached only at run time fails naming
itself. Every process here writes the trimmed copy into the session's own cache, not the user's."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT, graph_of

from analysis import sdk_scan, sdk_subset

_RECORD = """
import pickle, sys
from analysis import plan, sdk_subset
installed = sdk_subset.install()
from workloads.checks import gate
graph = plan.record(gate.read(sys.argv[1]))
loaded = [n for n, m in list(sys.modules.items()) if n.startswith(("pulumi_aws.", "pulumi_kubernetes."))
          and type(m).__name__ != "_LazyModule"]  # not a package registered and never loaded
sys.stdout.buffer.write(pickle.dumps((installed, loaded, graph)))
"""


@pytest.fixture(scope="session")
def cache(tmp_path_factory) -> Path:
    """The session's trimmed-SDK cache (written by the first process that plans)."""
    return tmp_path_factory.getbasetemp() / "sdk-subset"


def _run(args: list[str], cache: Path, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "MOE_RL_SDK_SUBSET_CACHE": str(cache), **(env or {})}
    return subprocess.run(args, cwd=ROOT, capture_output=True, env=env, **kwargs)


def _canonical(graph) -> list[dict]:
    """Each registered resource as data (dependencies in order, assets as what they name)."""
    import pulumi

    def plain(value):
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        if isinstance(value, pulumi.asset.Asset):
            return (type(value).__name__, getattr(value, "uri", None) or getattr(value, "path", None)
                    or getattr(value, "text", None))
        return value
    return sorted(({**plain(vars(r)), "dependencies": sorted(r.dependencies)} for r in graph.resources),
                  key=lambda r: r["urn"])


def _same_graph(stack: str, cache: Path) -> tuple[list[str], list[str]]:
    """The graph a fresh process records with the trimmed SDKs is the one recorded here with the SDKs in
    full; the packages it trimmed and the SDK modules it loaded."""
    installed, loaded, graph = pickle.loads(_run([sys.executable, "-c", _RECORD, stack], cache, check=True).stdout)
    assert "pulumi_aws.ec2" in installed and "pulumi_kubernetes.core.v1" in installed
    assert _canonical(graph) == _canonical(graph_of(stack))
    return installed, loaded


def test_the_reference_stack_registers_the_same_graph_loading_a_fraction_of_the_sdks(cache):
    installed, loaded = _same_graph("p5en-prod", cache)
    in_full = sum(len(list(sdk_scan.folder(p).glob("*.py"))) for p in installed)
    # the SDKs in full load every module of each package the program touches
    assert in_full > 500 and len(loaded) * 3 < in_full, (len(loaded), in_full)
    assert "pulumi_aws.ec2.instance" not in loaded and "pulumi_kubernetes.helm.v3.helm" not in loaded


@pytest.mark.contract
@pytest.mark.parametrize("stack", sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml")
                                         for p in (ROOT / "stacks").glob("Pulumi.*.yaml")))
def test_every_stack_registers_the_same_graph(stack, cache):
    _same_graph(stack, cache)


def _moe_rl_plan(stack: str, cache: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """The installed command (its own process: the trimmed SDKs, no collection, out without freeing)."""
    return _run([str(Path(sys.executable).with_name("moe-rl")), "plan", stack, "-o", "json"], cache, env, text=True)


@pytest.fixture(scope="module")
def library_plan() -> str:
    """What the plan called in this process (the SDKs in full) prints for p5en-shared."""
    import contextlib
    import io
    from analysis import plan
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert plan.main(["p5en-shared", "-o", "json"]) == 0
    return out.getvalue()


def test_the_installed_command_trims_the_sdks_and_prints_what_the_library_call_prints(tmp_path, library_plan):
    command = _moe_rl_plan("p5en-shared", tmp_path)
    assert (command.returncode, command.stdout, command.stderr) == (0, library_plan, "")
    written = [json.loads(p.read_text()) for p in tmp_path.glob("*/packages.json")]
    assert len(written) == 1 and "pulumi_aws.ec2" in written[0]  # this command wrote it


def test_where_the_copy_cannot_be_written_the_sdks_load_in_full(tmp_path, library_plan):
    (tmp_path / "a-file").write_text("")
    command = _moe_rl_plan("p5en-shared", tmp_path / "a-file")
    assert (command.returncode, command.stdout) == (0, library_plan)
    assert command.stderr.startswith("plan: the SDKs load in full (") and command.stderr.count("\n") == 1


def test_a_class_the_copy_lacks_plans_again_with_the_sdks_in_full(tmp_path, library_plan):
    """A class reached by a name the scan cannot read (here: the scan made to miss Eip, which the network
    component names) fails in the trimmed copy; the command plans again in full and prints the same plan."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(textwrap.dedent("""
        from analysis import sdk_scan
        _names = sdk_scan.sdk_names
        def _missing_eip(*args, **kwargs):
            found = _names(*args, **kwargs)
            found["pulumi_aws.ec2"].discard("Eip")
            return found
        sdk_scan.sdk_names = _missing_eip
    """))
    command = _moe_rl_plan("p5en-shared", tmp_path / "cache", {"PYTHONPATH": str(hooks)})
    assert (command.returncode, command.stdout) == (0, library_plan)
    assert command.stderr == ("plan: NotInSubset: pulumi_aws.ec2.Eip is not in the plan's trimmed copy of the SDK "
                              "(analysis/sdk_subset.py); planning again with the SDKs in full\n")


def test_help_and_a_bad_stack_write_no_copy(tmp_path):
    moe_rl = str(Path(sys.executable).with_name("moe-rl"))
    assert _run([moe_rl, "plan", "--help"], tmp_path / "cache").returncode == 0
    assert _run([moe_rl, "plan", "no-such-stack"], tmp_path / "cache").returncode == 2
    assert not (tmp_path / "cache").exists()


def test_the_scan_finds_a_class_however_the_sdk_is_imported(tmp_path):
    (tmp_path / "components").mkdir()
    (tmp_path / "program.py").write_text(textwrap.dedent("""
        import pulumi, pulumi_aws as cloud
        import pulumi_kubernetes as kube
        cloud.ec2.Vpc("v"); kube.core.v1.Service("s"); cloud.eks.get_cluster
        cloud.ec2.Subnet.get("s", "id")
        docs = "https://docs.aws.amazon.com"  # aws.amazon.com is no package
    """))
    (tmp_path / "components" / "a.py").write_text(textwrap.dedent("""
        import pulumi_aws
        import pulumi_kubernetes.core.v1 as corev1
        from pulumi_aws import kms, Provider
        from pulumi_aws.ecr import Repository as Repo
        from pulumi_kubernetes.apps import v1 as apps
        pulumi_aws.s3.Bucket("b"); kms.Key("k"); corev1.ConfigMap("c"); apps.Deployment("d"); Provider("p")
        pulumi_aws.config.region
    """))
    assert sdk_scan.sdk_names(tmp_path, tmp_path / "scan.json") == {
        "pulumi_aws.ec2": {"Vpc", "Subnet"}, "pulumi_aws.eks": {"get_cluster"}, "pulumi_aws.s3": {"Bucket"},
        "pulumi_aws.kms": {"Key"}, "pulumi_aws.ecr": {"Repository"}, "pulumi_aws.config": {"region"},
        "pulumi_kubernetes.core.v1": {"Service", "ConfigMap"}, "pulumi_kubernetes.apps.v1": {"Deployment"}}
    (tmp_path / "components" / "a.py").write_text("import pulumi_aws as aws\naws.fsx.LustreFileSystem('f')\n")
    assert sdk_scan.sdk_names(tmp_path, tmp_path / "scan.json")["pulumi_aws.fsx"] == {"LustreFileSystem"}  # read again


def test_a_type_that_shares_a_resource_s_name_is_kept_as_a_type(tmp_path):
    """s3's ``outputs.BucketLogging`` (what ``Bucket``'s ``logging`` is) shares its name with the resource
    ``s3.BucketLogging``: the type is kept, the resource's module is not."""
    folder = sdk_subset.build({"pulumi_aws.s3": {"Bucket"}}, tmp_path)
    s3 = folder / "pulumi_aws" / "s3"
    assert "class BucketLogging(dict):" in (s3 / "outputs.py").read_text()
    init = (s3 / "__init__.py").read_text()
    assert "from .bucket import *" in init and "bucket_logging" not in init
    exported = (s3 / "_inputs.py").read_text()
    assert "'BucketLoggingArgs'" in exported and "'BucketV2LoggingArgs'" not in exported


def test_a_package_that_does_more_than_import_its_modules_is_not_trimmed(tmp_path):
    """pulumi_aws.config swaps its module's class for one that reads the stack's config: it loads in full."""
    assert not sdk_subset.trimmable("pulumi_aws.config") and sdk_subset.trimmable("pulumi_aws.kms")
    code = textwrap.dedent(f"""
        from pathlib import Path
        from analysis import sdk_scan, sdk_subset
        print(sdk_subset.install({{"pulumi_aws.config": {{"region"}}, "pulumi_aws.kms": {{"Key"}}}},
                                 cache=Path({str(tmp_path)!r})))
        import pulumi_aws as aws
        print(aws.config.region)
    """)
    out = _run([sys.executable, "-c", code], tmp_path, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["['pulumi_aws.kms']", "None"]


def test_a_name_reached_only_at_run_time_fails_naming_itself(tmp_path):
    code = textwrap.dedent(f"""
        from pathlib import Path
        from analysis import sdk_scan, sdk_subset
        assert sdk_subset.install({{"pulumi_aws.kms": {{"Key"}}}}, cache=Path({str(tmp_path)!r})) == ["pulumi_aws.kms"]
        import pulumi_aws as aws
        assert aws.kms.Key.__module__ == "pulumi_aws.kms.key"
        try:
            getattr(aws.kms, "Ali" + "as")
        except AttributeError as err:
            print(type(err).__name__, err)
    """)
    out = _run([sys.executable, "-c", code], tmp_path, text=True, check=True).stdout
    assert "NotInSubset pulumi_aws.kms.Alias is not in the plan's trimmed copy of the SDK" in out


def test_a_package_already_loaded_in_full_is_left_as_it_is(tmp_path):
    code = textwrap.dedent(f"""
        from pathlib import Path
        import pulumi_aws as aws
        aws.kms.Alias  # loads kms in full
        from analysis import sdk_scan, sdk_subset
        print(sdk_subset.install({{"pulumi_aws.kms": {{"Key"}}, "pulumi_aws.ecr": {{"Repository"}}}},
                                 cache=Path({str(tmp_path)!r})))
        print(aws.kms.Alias.__module__)
    """)
    out = _run([sys.executable, "-c", code], tmp_path, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["['pulumi_aws.ecr']", "pulumi_aws.kms.alias"]


def test_a_plan_that_loses_the_race_keeps_the_winner_s_copy_and_leaves_nothing(tmp_path, monkeypatch):
    seeds = {"pulumi_aws.kms": {"Key"}}
    key = sdk_subset.build(seeds, tmp_path / "first").name
    write = sdk_subset._Subset.write

    def another_plan_finishes_first(self, into: Path) -> None:
        write(self, into)
        shutil.copytree(into, into.parent / key)
    monkeypatch.setattr(sdk_subset._Subset, "write", another_plan_finishes_first)
    folder = sdk_subset.build(seeds, tmp_path / "second")
    assert folder == tmp_path / "second" / key and [p.name for p in (tmp_path / "second").iterdir()] == [key]


def test_copies_unused_for_a_month_and_dead_staging_are_removed(tmp_path):
    old, recent, dead = tmp_path / "old", tmp_path / "recent", tmp_path / ".new-dead"
    for folder in (old, recent, dead):
        folder.mkdir()
        (folder / "packages.json").write_text("[]")
    month = time.time() - (sdk_subset.KEEP_DAYS + 1) * 86400
    os.utime(old / "packages.json", (month, month))
    os.utime(dead, (time.time() - 7200,) * 2)  # staging a plan left two hours ago
    folder = sdk_subset.build({"pulumi_aws.kms": {"Key"}}, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == sorted([folder.name, "recent"])


def test_every_module_of_the_program_that_imports_an_sdk_is_scanned():
    """The scan reads SOURCES; a module elsewhere that the program imports and that names an SDK class would
    go unseen (its classes would then fail in the trimmed copy and the plan run twice)."""
    beside = {"tests", "examples", "scripts", "contracts", "controlplane", "benchmarks"}  # not the program
    importing = {p.relative_to(ROOT) for p in ROOT.rglob("*.py")
                 if not p.relative_to(ROOT).parts[0].startswith(".") and p.relative_to(ROOT).parts[0] not in beside
                 and re.search(r"^\s*(import|from) pulumi_(aws|kubernetes)\b", p.read_text(), re.M)}
    assert importing, "the scan would have nothing to read"
    unscanned = {str(p) for p in importing if p.parts[0] not in sdk_scan.SOURCES}
    assert unscanned == {"analysis/sdk_subset.py"}  # which imports the SDKs' roots only, to point their packages
