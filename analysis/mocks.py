"""Run a Pulumi program offline under the mock engine and record the graph it registers.

Used by the tests and by the offline plan: every resource's type, name, inputs, parent,
dependencies and options are recorded from the RegisterResource requests, and the mocks
return the computed outputs the program reads (ARNs, ids, the EKS endpoint, launch template
versions), so the program runs exactly as under ``pulumi up`` up to the provider calls.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import pulumi
from pulumi.runtime import mocks as _mocks
from pulumi.runtime import rpc as _rpc
from pulumi.runtime import settings as _settings

ACCOUNT = "123456789012"
REMOTE_CHILDREN = {"eks:index:Cluster": {"eksCluster": "aws:eks/cluster:Cluster"}}
"""Outputs of remote (multi-language) components that reference a resource created inside them.
Nothing inside a remote component runs offline, so the monitor registers the child under the
component (its state is the output ``computed_outputs`` gives, named ``<component>-<output>``) and
returns a reference to it: ``cluster.eks_cluster.name`` resolves as under ``pulumi up``. The child
is not recorded in the graph (the program did not register it)."""
ARN_RESOURCES = {
    "aws:kms/key:Key": "key/{id}",
    "aws:eks/cluster:Cluster": "cluster/{name}",
    "aws:ecr/repository:Repository": "repository/{name}",
    "aws:backup/vault:Vault": "backup-vault:{name}",
}
"""The resource part of the ARN AWS gives a resource of these types (Service Authorization
Reference, "Resource types defined by" KMS, EKS, ECR, AWS Backup): a policy that names one is
linted against the ARN format of its actions, so the mock ARN has the real shape. Others get
``<region>:<account>:<name>``."""


@dataclass
class Registered:
    type: str
    name: str
    urn: str
    inputs: dict
    outputs: dict
    custom: bool
    parent: str
    dependencies: list[str]
    retain_on_delete: bool
    protect: bool
    provider: str = ""
    """URN of the explicit provider the resource was registered with ("" for the default)."""
    custom_timeouts: dict = field(default_factory=dict)
    """``customTimeouts`` of the RegisterResource request (create/update/delete, as Go durations)."""
    ignore_changes: list = field(default_factory=list)
    """``ignoreChanges`` of the RegisterResource request (input property paths)."""


@dataclass
class Graph:
    resources: list[Registered] = field(default_factory=list)

    def of_type(self, type_: str) -> list[Registered]:
        return [r for r in self.resources if r.type == type_]

    def named(self, type_: str, name: str) -> Registered:
        found = [r for r in self.of_type(type_) if r.name == name]
        if len(found) != 1:
            raise KeyError(f"{len(found)} resources of type {type_} named {name}")
        return found[0]

    def by_urn(self) -> dict[str, Registered]:
        return {r.urn: r for r in self.resources}

    def children(self, parent: Registered, type_: str | None = None) -> list[Registered]:
        """Every resource below ``parent`` (transitively), optionally of one type."""
        below, frontier = [], {parent.urn}
        while frontier:
            step = [r for r in self.resources if r.parent in frontier]
            below += step
            frontier = {r.urn for r in step}
        return [r for r in below if type_ is None or r.type == type_]


def computed_outputs(type_: str, name: str, inputs: dict, region: str) -> dict:
    """Outputs AWS would compute that the program reads."""
    service = type_.split(":")[1].split("/")[0]
    resource = ARN_RESOURCES[type_].format(id=f"{name}-id", name=inputs.get("name") or name) \
        if type_ in ARN_RESOURCES else name
    out: dict[str, Any] = {"arn": f"arn:aws:{service}:{region}:{ACCOUNT}:{resource}", "id": f"{name}-id"}
    if type_ == "aws:eks/cluster:Cluster":
        out.update(endpoint=f"https://{name}.eks.{region}.amazonaws.com",
                   certificateAuthority={"data": "Q0EtREFUQQ=="},
                   vpcConfig={**inputs.get("vpcConfig", {}), "clusterSecurityGroupId": f"sg-{name}-cluster"},
                   name=inputs.get("name", name))
    elif type_ == "aws:ec2/launchTemplate:LaunchTemplate":
        out["latestVersion"] = 1
    elif type_ == "aws:ec2/eip:Eip":
        out["allocationId"] = f"eipalloc-{name}"
    elif type_ in ("aws:ec2/placementGroup:PlacementGroup", "aws:backup/vault:Vault"):
        out["name"] = inputs.get("name", name)
    elif type_ == "aws:iam/role:Role":
        out.update(arn=f"arn:aws:iam::{ACCOUNT}:role/{name}", name=name)
    elif type_ == "aws:s3/bucket:Bucket":
        out.update(bucket=inputs.get("bucket", name), arn=f"arn:aws:s3:::{inputs.get('bucket', name)}")
    elif type_ == "aws:eks/nodeGroup:NodeGroup":
        out["nodeGroupName"] = inputs.get("nodeGroupName", name)
    elif type_ == "aws:eks/accessEntry:AccessEntry":
        out["principalArn"] = inputs.get("principalArn")
    elif type_ == "aws:fsx/lustreFileSystem:LustreFileSystem":
        out.update(dnsName=f"{name}-id.fsx.{region}.amazonaws.com", mountName="abcdefgh")
    elif type_ == "eks:index:Cluster":  # pulumi-eks (remote): the outputs programs read, see REMOTE_CHILDREN
        eks = computed_outputs("aws:eks/cluster:Cluster", f"{name}-eksCluster", {
            "name": inputs.get("name") or f"{name}-eksCluster",
            "accessConfig": {"authenticationMode": inputs.get("authenticationMode", "CONFIG_MAP")}}, region)
        # pulumi-eks's own cluster group, or the EKS-created one with skipDefaultSecurityGroups
        own_sg = None if inputs.get("skipDefaultSecurityGroups") else f"sg-{name}-eksClusterSecurityGroup"
        out.update(eksCluster=eks, kubeconfigJson=json.dumps(_kubeconfig(eks)),
                   clusterSecurityGroupId=own_sg or eks["vpcConfig"]["clusterSecurityGroupId"])
    return out


def _kubeconfig(eks: dict) -> dict:
    """The kubeconfig pulumi-eks generates for a cluster (token from ``aws eks get-token``)."""
    return {"apiVersion": "v1", "kind": "Config", "current-context": "aws",
            "clusters": [{"name": "kubernetes", "cluster": {"server": eks["endpoint"],
                          "certificate-authority-data": eks["certificateAuthority"]["data"]}}],
            "contexts": [{"name": "aws", "context": {"cluster": "kubernetes", "user": "aws"}}],
            "users": [{"name": "aws", "user": {"exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws",
                "args": ["eks", "get-token", "--cluster-name", eks["name"], "--output", "json"]}}}]}


class _Mocks(pulumi.runtime.Mocks):
    def __init__(self, region: str):
        self.region = region

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        outputs = {**args.inputs, **computed_outputs(args.typ, args.name, args.inputs, self.region)}
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs):
        raise NotImplementedError(f"the program must not call provider functions offline: {args.token}")


class _RecordingMonitor(_mocks.MockMonitor):
    def __init__(self, mocks: _Mocks, graph: Graph):
        super().__init__(mocks)
        self.graph = graph
        self._lock = threading.Lock()

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        for output, child_type in REMOTE_CHILDREN.get(request.type, {}).items():
            self._reference_child(request.name, response, output, child_type)
        if request.type != "pulumi:pulumi:Stack":
            inputs = pulumi.runtime.rpc.deserialize_properties(request.object)
            state = self.resources[response.urn].state if response.urn in self.resources else {}
            with self._lock:
                self.graph.resources.append(Registered(
                    type=request.type, name=request.name, urn=response.urn, inputs=inputs,
                    outputs=state, custom=bool(request.custom), parent=request.parent,
                    dependencies=list(request.dependencies),
                    retain_on_delete=bool(request.retainOnDelete), protect=bool(request.protect),
                    provider=request.provider.rsplit("::", 1)[0] if request.provider else "",
                    custom_timeouts={k: v for k in ("create", "update", "delete")
                                     if (v := getattr(request.customTimeouts, k, ""))},
                    ignore_changes=list(request.ignoreChanges)))
        return response

    def _reference_child(self, name: str, response, output: str, child_type: str) -> None:
        """Register ``output`` of a remote component as its child; answer a reference to it."""
        state = self.resources[response.urn].state
        child = state[output]
        urn = self.make_urn(response.urn, child_type, f"{name}-{output}")
        self.resources[urn] = self.ResourceRegistration(urn, child["id"], child)
        state[output] = {_rpc._special_sig_key: _rpc._special_resource_sig, "urn": urn, "id": child["id"]}
        response.object[output] = state[output]


def _ensure_event_loop() -> None:
    """The mock engine runs on the thread's event loop; ``asyncio.run`` elsewhere (a test, a gRPC
    client) leaves the main thread without one."""
    try:
        closed = asyncio.get_event_loop_policy().get_event_loop().is_closed()
    except RuntimeError:
        closed = True
    if closed:
        asyncio.set_event_loop(asyncio.new_event_loop())


def _skip_source_positions() -> None:
    """Pulumi's SDK walks the Python stack for every resource it registers, for a source position
    the mock engine never reads (about a tenth of a mock run): under mocks the walk is skipped, with
    the empty trace the SDK itself sends when it finds no frame."""
    from pulumi.runtime import resource
    from pulumi.runtime.proto import source_pb2
    resource._get_stack_trace = source_pb2.StackTrace


def _skip_alias_urns() -> None:
    """``Resource.__init__`` collapses each alias option to a URN Output (about a fifth of a mock
    run: pulumi_kubernetes gives its resources several each) for ``all_aliases``, which the SDK
    calls only for an engine without alias specs (pulumi/runtime/resource.py ``prepare_aliases``).
    The mock engine supports them (``MockMonitor.GetDeploymentInfo``: ALIAS_SPECS), as the CLI
    does, so the SDK sends each alias as a spec and never reads the URNs: under mocks an alias the
    collapse would accept (a URN, or an ``Alias`` with a name and a type) is kept as given; any other
    goes through the SDK's collapse, whose error ``pulumi up`` raises too (``tests/test_mocks.py``)."""
    import pulumi.resource
    from pulumi.runtime.resource import collapse_alias_to_urn

    def collapse(alias, name, type_, parent):
        if isinstance(alias, str) or isinstance(alias, pulumi.Alias) and alias.name is not None \
                and alias.type_ is not None:
            return alias
        return collapse_alias_to_urn(alias, name, type_, parent)

    pulumi.resource.collapse_alias_to_urn = collapse


def run(program: Callable[[], Any], *, region: str, stack: str, project: str = "moe-rl-platform",
        preview: bool = False, graph: Graph | None = None) -> Graph:
    """Run ``program`` under fresh mocks; return every resource it registered (into ``graph``
    when given, so a caller can inspect what was registered before an error).

    Errors raised inside ``apply`` callbacks propagate, so a broken program fails here.
    """
    graph = Graph() if graph is None else graph
    _skip_source_positions()
    _skip_alias_urns()
    _ensure_event_loop()
    mocks = _Mocks(region)
    _settings.reset_options()
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=preview,
                             monitor=_RecordingMonitor(mocks, graph))
    pulumi.runtime.test(program)()
    return graph
