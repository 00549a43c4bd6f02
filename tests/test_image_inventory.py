"""Every image a node pulls comes from the stack's own ECR registry or the region's EKS registry, and
one image inventory that the plan, the deploy check, ``runs submit`` and ``bench run`` all judge
(issue 32 items 1, 2 and 6): a placeholder digest or principal anywhere in what they send is refused
before anything is created, naming the file, the field and what to put there."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, STACKS, graph_of, load
from test_first_deploy import REAL, pinned_profiles, pinned_stack_dir
from test_runs import REPO, SHARED, api  # noqa: F401  (api: the fake cluster fixture)
from test_workloads import merge, variant

from analysis import mocks
from analysis.rules.iam_eval import ALLOW, decide
from components.network import AL2023_REPOSITORY_BUCKET, ECR_LAYER_BUCKET
from components.registry import eks_addon_registry

HELM = "kubernetes:helm.sh/v3:Release"
PLACEHOLDER = "0" * 63 + "7"
CHARTS = {"kuberay-operator": "kuberay_operator", "volcano": "volcano", "aws-fsx-csi-driver": "fsx_csi_driver",
          "nvidia-device-plugin": "nvidia_device_plugin", "aws-efa-k8s-device-plugin": "efa_device_plugin"}


def container_images(value, owner=""):
    """(owner, image) of every container anywhere in a recorded object (any kind, any depth)."""
    if isinstance(value, list):
        for v in value:
            yield from container_images(v, owner)
    elif isinstance(value, dict):
        md = value.get("metadata")
        owner = f"{value.get('kind')} {md.get('name')}" if isinstance(md, dict) and value.get("kind") else owner
        for key, v in value.items():
            if key in ("containers", "initContainers", "ephemeralContainers") and isinstance(v, list):
                yield from ((owner, c["image"]) for c in v if isinstance(c, dict) and "image" in c)
            else:
                yield from container_images(v, owner)


def local_prefixes(stack: str) -> tuple[str, str]:
    cfg = load(stack)
    return (f"{mocks.ACCOUNT}.dkr.ecr.{cfg.region}.amazonaws.com/{cfg.cluster_name}/",
            f"{eks_addon_registry(cfg.region)}/")


@pytest.mark.parametrize("stack", STACKS)
def test_every_container_of_every_stack_pulls_from_its_registry_or_the_eks_registry(stack):
    graph = graph_of(stack)
    images = [(owner, image) for r in graph.resources if r.type.startswith("kubernetes:") and r.type != HELM
              for owner, image in container_images(r.inputs)]
    assert images
    assert [(o, i) for o, i in images if not i.startswith(local_prefixes(stack))] == []


@pytest.mark.parametrize("stack", STACKS)
def test_every_chart_image_is_pulled_through_the_stack_by_digest(stack):
    """Each release's values make its chart's templates render images of the stack's registry (or the
    EKS registry), pinned by digest, for every image the chart runs."""
    from stackconfig.chart_images import rendered
    releases = {r.inputs["name"]: r.inputs["values"] for r in graph_of(stack).of_type(HELM)}
    assert set(releases) == set(CHARTS)
    for name, values in releases.items():
        for pin, image in rendered(CHARTS[name], values).items():
            assert image.startswith(local_prefixes(stack)), (name, pin, image)
            assert "@sha256:" in image, (name, pin, image)


@pytest.mark.parametrize("stack", STACKS)
def test_the_s3_endpoint_names_only_the_platform_buckets_and_aws_owned_ones(stack):
    cfg, graph = load(stack), graph_of(stack)
    (policy,) = graph.of_type("aws:ec2/vpcEndpointPolicy:VpcEndpointPolicy")
    buckets = {r.outputs["arn"] for r in graph.of_type("aws:s3/bucket:Bucket")}
    aws_owned = {f"arn:aws:s3:::{b.format(region=cfg.region)}/*" for b in (ECR_LAYER_BUCKET, AL2023_REPOSITORY_BUCKET)}
    named = {res for st in json.loads(policy.inputs["policy"])["Statement"]
             for res in ([st["Resource"]] if isinstance(st["Resource"], str) else st["Resource"])}
    assert named - aws_owned - buckets - {f"{b}/*" for b in buckets} == set()
    allowed = [json.loads(policy.inputs["policy"])]
    assert decide(allowed, "s3:GetObject", f"arn:aws:s3:::prod-registry-k8s-io-{cfg.region}/x") is None


def test_the_inventory_is_every_image_the_graph_pulls():
    """What the checks judge (``program.stack_pulls``) is what the recorded graph pulls: every
    object's containers and every chart's images, filled in as the program fills them."""
    import program
    from stackconfig.chart_images import rendered
    from stackconfig.images import with_url
    for stack in ("p5en-prod", "p5en-shared", "dev"):
        cfg, graph = load(stack), graph_of(stack)
        url = f"{mocks.ACCOUNT}.dkr.ecr.{cfg.region}.amazonaws.com/{cfg.cluster_name}/workloads"
        inventory = {(p.owner.split(" ")[0], with_url(p.image, url)) for p in program.stack_pulls(cfg, program.derive(cfg))}
        pulled = {(o.split(" ")[0], i) for r in graph.resources if r.type.startswith("kubernetes:") and r.type != HELM
                  for o, i in container_images(r.inputs)}
        pulled |= {("helm", image) for r in graph.of_type(HELM)
                   for image in rendered(CHARTS[r.inputs["name"]], r.inputs["values"]).values()}
        assert {(kind if kind != "helm" else "helm", i) for kind, i in inventory} == pulled, stack


# --- one inventory, four checks ------------------------------------------------------------------

def placeholder_job(image: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "new-job", "namespace": "rl"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "initContainers": [
                {"name": "fetch", "image": image, "command": ["true"]}], "containers": [
                {"name": "main", "image": "{imageRepository}:x@sha256:" + REAL, "command": ["true"]}]}}}}


def test_the_team_directories_job_placeholder_is_refused_at_deploy_naming_field_and_file():
    """p5en-shared's team-directories Job pulls workloads.images.checkpointTrigger: a placeholder there
    was missed by a check that walked the pods of the pools only."""
    import program
    from test_first_deploy import _aws, _deploy
    override = pinned_profiles(SHARED)
    override["workloads"]["images"] = {"checkpointTrigger": f"public.ecr.aws/docker/library/busybox:1.37.0@sha256:{PLACEHOLDER}"}
    cfg = variant(SHARED, override)
    graph = mocks.Graph()
    with pytest.raises(program.StackConfigError) as err:
        _deploy(cfg, _aws(), graph)
    assert graph.resources == []
    line = next(li for li in str(err.value).splitlines() if "checkpointTrigger" in li)
    assert line.startswith("  stacks/Pulumi.p5en-shared.yaml: workloads.images.checkpointTrigger: image ")
    assert "placeholder digest (pulled by Job rl/team-directories)" in line
    assert "`crane digest public.ecr.aws/docker/library/busybox:1.37.0` prints" in line


def test_a_new_job_with_a_placeholder_is_refused_by_the_plan_and_the_deploy(monkeypatch):
    import program
    from analysis.planning import deploy_warnings
    from test_first_deploy import _aws, _deploy
    image = f"quay.io/example/fetch:1@sha256:{PLACEHOLDER}"
    listed = program.stack_objects
    monkeypatch.setattr(program, "stack_objects", lambda cfg, m: [*listed(cfg, m), placeholder_job(image)])
    warnings = deploy_warnings(load("p5en-prod"))  # what the plan prints as its WARNING lines
    expected = (f"image {{imageRegistry}}/quay/example/fetch:1@sha256:{PLACEHOLDER} has a placeholder digest "
                f"(pulled by Job rl/new-job)")
    assert any(expected in w for w in warnings)
    with pytest.raises(program.StackConfigError, match="cannot deploy") as err:
        _deploy(variant("p5en-prod", pinned_profiles("p5en-prod")), _aws())
    assert [li for li in str(err.value).splitlines()[1:]] == [f"  {expected}; allowed: the digest "
                                                              f"`crane digest quay.io/example/fetch:1` prints"]


def _with_new_job(monkeypatch, module: str, image: str) -> None:
    """Whatever ``module`` submits carries a submitter Job template pulling ``image`` (KubeRay makes
    a Job of ``spec.submitterPodTemplate``)."""
    import importlib
    mod = importlib.import_module(module)
    made = mod.run_objects

    def with_job(*args, **kwargs):
        objs = made(*args, **kwargs)
        objs.rayjob["spec"]["submitterPodTemplate"] = placeholder_job(image)["spec"]["template"]
        return objs
    monkeypatch.setattr(mod, "run_objects", with_job)


def test_runs_submit_refuses_a_new_job_with_a_placeholder_before_the_cluster(api, monkeypatch, tmp_path):
    from workloads.cli.runs import main
    stacks = pinned_stack_dir(tmp_path, SHARED)
    run = ROOT / "runs" / "grpo-qwen3-30b.yaml"
    _with_new_job(monkeypatch, "workloads.cli.runs", f"quay.io/example/fetch:1@sha256:{PLACEHOLDER}")
    fake, client = api({})
    assert main(["submit", SHARED, str(run), "--repository", REPO, "--stack-dir", str(stacks)],
                client=client, out=lambda _: None) == 1
    assert not fake.calls


def test_runs_submit_refuses_the_shared_stacks_placeholder_digest(api, capsys):
    from workloads.cli.runs import main
    fake, client = api({})
    assert main(["submit", SHARED, str(ROOT / "runs" / "grpo-qwen3-30b.yaml"), "--repository", REPO],
                client=client, out=lambda _: None) == 1
    assert not fake.calls
    err = capsys.readouterr().err
    assert "stacks/Pulumi.p5en-shared.yaml: versions.software.images.miles-0.1: image" in err
    assert "has a placeholder digest" in err


def test_bench_run_refuses_a_new_job_with_a_placeholder_before_submitting(monkeypatch, tmp_path):
    from bench import runner
    stacks = pinned_stack_dir(tmp_path, SHARED)
    _with_new_job(monkeypatch, "bench.runner", f"quay.io/example/fetch:1@sha256:{PLACEHOLDER}")
    sent = []

    class Client:
        def __getattr__(self, name):
            sent.append(name)
            raise AssertionError(f"the cluster was called: {name}")
    with pytest.raises(ValueError, match=r"cannot send RayJob example-ab-\S+: image \{imageRegistry\}/quay/example/"
                                         r"fetch:1@sha256:0{63}7 has a placeholder digest"):
        runner.run_experiment(ROOT / "experiments" / "example-ab.yaml", tmp_path / "out", False, Client,
                              lambda _: None, repository=REPO, stack_dir=stacks, s3=lambda region: None,
                              log_bucket="b")
    assert sent == []


# --- principals ----------------------------------------------------------------------------------

def test_example_account_principals_are_refused_at_deploy_and_warned_by_the_plan():
    import program
    from analysis.planning import deploy_warnings
    from test_first_deploy import _aws, _deploy
    assert any(w.startswith("stacks/Pulumi.p5en-shared.yaml: workloads.teams[alpha].members[0]: "
                            "arn:aws:iam::123456789012:role/team-alpha-runs is in the documentation's example account")
               for w in deploy_warnings(load(SHARED)))
    override = pinned_profiles("p5en-prod")
    override["cluster"] = {"adminRoleArns": ["arn:aws:iam::123456789012:role/platform-admin"]}
    with pytest.raises(program.StackConfigError) as err:
        _deploy(variant("p5en-prod", override), _aws())
    assert str(err.value).splitlines()[1:] == [
        "  stacks/Pulumi.p5en-prod.yaml: cluster.adminRoleArns[0]: arn:aws:iam::123456789012:role/platform-admin is in "
        "the documentation's example account; allowed: the ARN in your own account"]


# --- the caches and the node role ------------------------------------------------------------------

def test_docker_hub_images_need_the_stacks_credential_and_get_a_rule_with_it():
    import program
    from test_first_deploy import _aws, _deploy
    override = pinned_profiles("p5en-prod")
    arn = override.pop("registries")["credentials"]["docker-hub"]
    with pytest.raises(program.StackConfigError) as err:
        _deploy(variant("p5en-prod", override), _aws())
    (line,) = str(err.value).splitlines()[1:]
    assert line.startswith("  stacks/Pulumi.p5en-prod.yaml: registries.credentials.docker-hub: ECR needs a credential "
                           "to cache registry-1.docker.io for docker.io/volcanosh/vc-controller-manager:v1.15.1")
    from test_registry import build
    graph, _ = build(cache_namespace="rl-p5en-prod", credentials={"docker-hub": arn})
    rules = {r.inputs["upstreamRegistryUrl"]: r.inputs for r in graph.of_type("aws:ecr/pullThroughCacheRule:PullThroughCacheRule")}
    assert rules["registry-1.docker.io"] == {"ecrRepositoryPrefix": "rl-p5en-prod/docker-hub",
                                             "upstreamRegistryUrl": "registry-1.docker.io", "credentialArn": arn}
    assert {u: r["ecrRepositoryPrefix"] for u, r in rules.items() if u != "registry-1.docker.io"} == {
        "public.ecr.aws": "rl-p5en-prod/ecr-public", "registry.k8s.io": "rl-p5en-prod/k8s", "quay.io": "rl-p5en-prod/quay"}


def test_the_nodes_import_through_the_stacks_caches_and_pull_nowhere_else():
    graph = graph_of("p5en-prod")
    policy = json.loads(graph.named("aws:iam/rolePolicy:RolePolicy", "rl-p5en-prod-images-node-pulls").inputs["policy"])
    registry = f"arn:aws:ecr:us-east-1:{mocks.ACCOUNT}"
    quay = f"{registry}:repository/rl-p5en-prod/quay/kuberay/operator"
    for action in ("ecr:BatchImportUpstreamImage", "ecr:CreateRepository", "ecr:BatchGetImage"):
        assert decide([policy], action, quay) == ALLOW, action
    assert decide([policy], "ecr:BatchGetImage", f"{registry}:repository/rl-other/quay/kuberay/operator") != ALLOW
    assert decide([policy], "ecr:BatchImportUpstreamImage", f"{registry}:repository/rl-p5en-prod/workloads") is None


def test_an_image_of_a_registry_ecr_cannot_cache_is_copied_into_the_stacks_repository():
    from stackconfig.images import copy_command, localized
    ref = f"nvcr.io/nvidia/k8s-device-plugin:v0.20.0@sha256:{REAL}"
    assert localized(ref) == f"{{imageRepository}}:k8s-device-plugin-v0.20.0@sha256:{REAL}"
    assert copy_command(ref) == f'crane copy nvcr.io/nvidia/k8s-device-plugin@sha256:{REAL} "$REPO:k8s-device-plugin-v0.20.0"'
    unpinned = ref.split("@")[0] + f"@sha256:{PLACEHOLDER}"  # copied by its tag until its digest is pinned
    assert copy_command(unpinned) == 'crane copy nvcr.io/nvidia/k8s-device-plugin:v0.20.0 "$REPO:k8s-device-plugin-v0.20.0"'
    assert localized("busybox:1.37") == "{imageRegistry}/docker-hub/library/busybox:1.37"
    assert localized("registry.example:5000/a/b:1") == "registry.example:5000/a/b:1"  # refused by the checks
