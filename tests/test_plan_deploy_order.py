"""The modelled deploy order agrees with how the Pulumi Python SDK really orders creates, and
the create-time table covers what the program registers."""

import threading
import time

import pulumi
from conftest import STACKS, graph_of

from analysis import create_times, mocks
from analysis.deploy_order import DEPENDENCY, PARENT, PROVIDER, inherited_waits, schedule

SLOW = 0.3


class _Child(pulumi.ComponentResource):
    def __init__(self, name, opts=None):
        super().__init__("test:index:Group", name, None, opts)
        pulumi.CustomResource("test:index:Thing", f"{name}-child", {}, opts=pulumi.ResourceOptions(parent=self))
        self.register_outputs({})


def _program():
    slow = pulumi.CustomResource("test:index:Thing", "slow", {})
    _Child("group", opts=pulumi.ResourceOptions(depends_on=[slow]))
    pulumi.CustomResource("test:index:Thing", "free", {})
    provider = pulumi.ProviderResource("test", "prov", {"token": slow.id})
    pulumi.CustomResource("test:index:Thing", "via-provider", {}, opts=pulumi.ResourceOptions(provider=provider))


class _TimedMocks(pulumi.runtime.Mocks):
    """Creates take SLOW seconds for ``slow``; records when each create starts and ends."""

    def __init__(self):
        self.t0, self.start, self.end, self.lock = time.monotonic(), {}, {}, threading.Lock()

    def new_resource(self, args):
        with self.lock:
            self.start[args.name] = time.monotonic() - self.t0
        if args.name == "slow":
            time.sleep(SLOW)
        with self.lock:
            self.end[args.name] = time.monotonic() - self.t0
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args):
        return {}


def test_model_matches_the_sdk_ordering():
    observed = _TimedMocks()
    pulumi.runtime.set_mocks(observed, project="p", stack="s", preview=False)
    pulumi.runtime.test(_program)()
    # What the SDK really did: the component's child and the provider's user waited for `slow`,
    # although neither lists it in its own dependencies; `free` did not wait.
    assert observed.start["group-child"] >= observed.end["slow"]
    assert observed.start["via-provider"] >= observed.end["slow"]
    assert observed.start["free"] < observed.end["slow"]

    graph = mocks.run(_program, region="us-east-1", stack="s")
    child = graph.named("test:index:Thing", "group-child")
    assert child.dependencies == []  # the wait is not in the recorded dependencies
    sched = schedule(graph, seconds=lambda r: 100.0 if r.name == "slow" else (
        1.0 if r.custom and not r.type.startswith("pulumi:providers:") else 0.0))
    steps = {s.name: s for s in sched.steps.values()}
    assert steps["group-child"].start == 100.0 and steps["group-child"].reason == PARENT
    assert steps["via-provider"].start == 100.0 and steps["via-provider"].reason == PROVIDER
    assert steps["prov"].reason == DEPENDENCY
    assert steps["free"].start == 0.0
    assert [p.step.name for p in sched.path] == ["slow", "group-child"]
    assert sched.path[1].via == "parent Group group's depends_on"
    assert sched.serial_seconds == 103.0 and sched.critical_seconds == 101.0
    held = {s.name: delay for s, delay in inherited_waits(graph, sched)}
    assert held == {"group-child": 100.0}
    unheld = schedule(graph, seconds=lambda r: 100.0 if r.name == "slow" else float(r.custom),
                      component_depends_on=False)
    assert {s.name: s.start for s in unheld.steps.values()}["group-child"] == 0.0


def test_every_aws_type_has_a_create_time():
    """AWS creates range from a second to ten minutes: none may fall back to a default."""
    special = {"aws:eks/nodeGroup:NodeGroup", "aws:eks/addon:Addon"}
    for stack in STACKS:
        types = {r.type for r in graph_of(stack).resources if r.custom and r.type.startswith("aws:")}
        assert types - set(create_times.SECONDS) - special == set(), stack


def test_gpu_node_groups_take_longer_than_cpu_ones():
    gpu = create_times.create_seconds("aws:eks/nodeGroup:NodeGroup", {"amiType": "AL2023_x86_64_NVIDIA"})
    cpu = create_times.create_seconds("aws:eks/nodeGroup:NodeGroup", {"amiType": "AL2023_x86_64_STANDARD"})
    assert gpu > cpu > 0
    assert create_times.create_seconds("rlplatform:nodes:NodePool", {}, custom=False) == 0
