"""The plan's trimmed SDKs (analysis/sdk_subset.py): the program registers the same graph with them as with
the SDKs in full, the plan's own process loads a fraction of the SDKs' modules, and a name the scan missed
fails naming itself."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT, graph_of

from analysis import sdk_subset

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


def _same_graph(stack: str) -> tuple[list[str], list[str]]:
    """The graph a fresh process records with the trimmed SDKs (built in the plan's own cache, as
    ``moe-rl plan`` does) is the one recorded here with the SDKs in full; the packages it trimmed and the
    SDK modules it loaded."""
    done = subprocess.run([sys.executable, "-c", _RECORD, stack], cwd=ROOT, capture_output=True, check=True)
    installed, loaded, graph = pickle.loads(done.stdout)
    assert "pulumi_aws.ec2" in installed and "pulumi_kubernetes.core.v1" in installed
    assert _canonical(graph) == _canonical(graph_of(stack))
    return installed, loaded


def test_the_reference_stack_registers_the_same_graph_loading_a_fraction_of_the_sdks():
    installed, loaded = _same_graph("p5en-prod")
    in_full = sum(len(list(sdk_subset._folder(p).glob("*.py"))) for p in installed)
    # the SDKs in full load every module of each package the program touches
    assert in_full > 700 and len(loaded) * 4 < in_full, (len(loaded), in_full)
    assert "pulumi_aws.ec2.instance" not in loaded and "pulumi_kubernetes.helm.v3.helm" not in loaded


@pytest.mark.contract
@pytest.mark.parametrize("stack", sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml")
                                         for p in (ROOT / "stacks").glob("Pulumi.*.yaml")))
def test_every_stack_registers_the_same_graph(stack):
    _same_graph(stack)


def test_the_scan_reads_each_file_s_own_alias_and_only_real_packages(tmp_path):
    (tmp_path / "components").mkdir()
    (tmp_path / "program.py").write_text(textwrap.dedent("""
        import pulumi_aws as cloud
        import pulumi_kubernetes as kube
        cloud.ec2.Vpc("v"); kube.core.v1.Service("s"); cloud.eks.get_cluster
        docs = "https://docs.aws.amazon.com"  # aws.amazon.com is no package
    """))
    (tmp_path / "components" / "a.py").write_text("import pulumi_aws as aws\naws.s3.Bucket('b')\naws.amazon.com\n")
    assert sdk_subset.sdk_names(tmp_path) == {"pulumi_aws.ec2": {"Vpc"}, "pulumi_aws.eks": {"get_cluster"},
                                               "pulumi_kubernetes.core.v1": {"Service"}, "pulumi_aws.s3": {"Bucket"}}


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


def test_a_name_the_scan_missed_fails_naming_itself(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from analysis import sdk_subset
        assert sdk_subset.install({{"pulumi_aws.kms": {{"Key"}}}}, cache=Path({str(tmp_path)!r})) == ["pulumi_aws.kms"]
        import pulumi_aws as aws
        assert aws.kms.Key.__module__ == "pulumi_aws.kms.key"
        try:
            aws.kms.Alias
        except AttributeError as err:
            print(err)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "pulumi_aws.kms.Alias is not in the plan's subset of the SDK" in out


def test_a_package_already_loaded_in_full_is_left_as_it_is(tmp_path):
    code = textwrap.dedent(f"""
        from pathlib import Path
        import pulumi_aws as aws
        aws.kms.Alias  # loads kms in full
        from analysis import sdk_subset
        print(sdk_subset.install({{"pulumi_aws.kms": {{"Key"}}, "pulumi_aws.ecr": {{"Repository"}}}},
                                 cache=Path({str(tmp_path)!r})))
        print(aws.kms.Alias.__module__)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["['pulumi_aws.ecr']", "pulumi_aws.kms.alias"]


def test_the_installed_command_prints_what_the_library_call_prints(capsys):
    """``moe-rl plan`` (its own process: the trimmed SDKs, no collection, out without freeing) and the
    plan called in this process (the SDKs in full) print the same plan and exit alike."""
    from analysis import plan
    command = subprocess.run([str(Path(sys.executable).with_name("moe-rl")), "plan", "p5en-shared", "-o", "json"],
                             cwd=ROOT, capture_output=True, text=True)
    code = plan.main(["p5en-shared", "-o", "json"])
    assert (command.returncode, command.stdout, command.stderr) == (code, capsys.readouterr().out, "")
    assert json.loads(command.stdout)["stack"] == "p5en-shared"
