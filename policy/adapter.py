"""Run the policy pack on a graph recorded under mocks, as `pulumi preview --policy-pack` would.

The engine hands CrossGuard each resource's properties as a protobuf Struct (every number a
float, secrets and unknowns as signature objects/sentinels); pulumi_policy 1.21 turns that into
``ResourceValidationArgs`` (inputs, options, provider) per resource and one
``StackValidationArgs`` (outputs, parent, dependencies, property dependencies) per stack. The
functions here build those objects the same way from ``analysis.mocks.Graph`` records, so the
policies are tested on exactly what they would receive.

``preview=True`` reproduces a preview of a stack that does not exist yet: every value the
provider computes (ids, ARNs, generated names, and every input built from one) is unknown.
The mock recorder does not keep property dependencies; they are rebuilt from the values each
input was computed from, restricted to the dependencies the SDK recorded.

``analyze`` additionally drives pulumi_policy's own analyzer servicer (``Analyze`` and
``AnalyzeStack``) with protobuf requests, without starting its gRPC server.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping

import pulumi
from google.protobuf import struct_pb2
from pulumi.runtime.proto import analyzer_pb2
from pulumi_policy import (EnforcementLevel, PolicyCustomTimeouts, PolicyProviderResource, PolicyResource,
                           PolicyResourceOptions, ResourceValidationArgs, ResourceValidationPolicy,
                           StackValidationArgs, StackValidationPolicy)
from pulumi_policy.deserialize import deserialize_properties
from pulumi_policy.policy import _PolicyAnalyzerServicer
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

from analysis import mocks
from stackconfig.stack import CONFIG_KEY
from stackconfig.files import PROJECT

from .rules import ALL, PACK_NAME

SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
SIG_KEY = "4dabf18193072939515e22adb298388d"
MIN_REFERENCE_LENGTH = 6
"""Shorter computed strings (e.g. a version "1") are too ambiguous to trace by value."""


@dataclass(frozen=True)
class Violation:
    policy: str
    urn: str
    message: str

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]


# --- values ------------------------------------------------------------------------------------

def _strings(value: Any) -> Iterator[str]:
    if type(value) is str:
        yield value
    elif type(value) is dict or isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, str):
        yield value


def _computed(r: mocks.Registered, region: str) -> set[str]:
    """Strings the provider computes for ``r`` (unknown during a first preview)."""
    given = set(_strings(r.inputs))
    out = mocks.computed_outputs(r.type, r.name, r.inputs, region) if r.custom else {}
    return {s for s in _strings(out) if s not in given and len(s) >= MIN_REFERENCE_LENGTH}


NAME_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
"""A reference is a whole token: never next to one of these (never the prefix of a longer name)."""
_NAME_RUN = re.compile(f"[{re.escape(''.join(sorted(NAME_CHARACTERS)))}]+")


class _References:
    """Strings, and ``find(text)``: whether ``text`` holds one of them as a whole token.

    A string is indexed by its leading run of name characters: where it stands in a text as a whole
    token, that run is the text's whole run there (the string's next character, if any, is no name
    character). So each run of the text is looked up once, whatever the number of strings (a
    preview's unknowns are every computed value of the stack). A string that starts with another
    character is scanned for with ``str.find``."""

    def __init__(self, strings: set[str]):
        self.strings = frozenset(strings)
        self._by_run: dict[str, list[str]] = {}
        self._other: list[str] = []
        for s in self.strings:
            run = _NAME_RUN.match(s)
            if run:
                self._by_run.setdefault(run.group(), []).append(s)
            else:
                self._other.append(s)

    def find(self, text: str) -> bool:
        if self._by_run:
            for run in _NAME_RUN.finditer(text):
                at = run.start()
                for s in self._by_run.get(run.group(), ()):
                    if text.startswith(s, at) and _ends_token(text, at + len(s)):
                        return True
        for s in self._other:
            at = text.find(s)
            while at >= 0:
                if (at == 0 or text[at - 1] not in NAME_CHARACTERS) and _ends_token(text, at + len(s)):
                    return True
                at = text.find(s, at + 1)
        return False


def _ends_token(text: str, end: int) -> bool:
    return end == len(text) or text[end] not in NAME_CHARACTERS


def _found(strings: list[str], references: _References, exact: set[str] = frozenset()) -> bool:
    """Whether one of ``strings`` (a value's, listed once by the caller) equals one of ``exact`` or
    ``references``, or embeds one of ``references`` (an ARN in a JSON policy, an endpoint in a
    kubeconfig)."""
    known, find = references.strings, references.find
    for s in strings:
        if s in exact or s in known or find(s):
            return True
    return False


def _blank_unknowns(value: Any, computed: _References) -> Any:
    """``value`` with every string built from a computed value replaced by the unknown sentinel."""
    if isinstance(value, Mapping):
        if value.get(SIG_KEY) == SECRET_SIG:
            return {**value, "value": _blank_unknowns(value.get("value"), computed)}
        return {k: _blank_unknowns(v, computed) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_blank_unknowns(v, computed) for v in value]
    if isinstance(value, str) and _found([value], computed):
        return UNKNOWN_STRING_VALUE
    return value


class Wire:
    """A recorded graph as the engine would send it to an analyzer."""

    def __init__(self, graph: mocks.Graph, *, preview: bool = False, region: str = "us-east-1"):
        self.graph = graph
        self.preview = preview
        self.by_urn = graph.by_urn()
        self.computed = {r.urn: _computed(r, region) for r in graph.resources}
        self._unknown = _References(set().union(*self.computed.values()) if preview else set())
        self._refs: dict[str, tuple[_References, set[str]]] = {}
        self._inputs: dict[str, dict] = {}

    def inputs(self, r: mocks.Registered) -> dict:
        if not self.preview:
            return r.inputs
        if r.urn not in self._inputs:
            self._inputs[r.urn] = _blank_unknowns(r.inputs, self._unknown)
        return self._inputs[r.urn]

    def outputs(self, r: mocks.Registered) -> dict:
        if not self.preview:
            return r.outputs
        # Computed outputs of a resource that does not exist yet are unknown; the rest are its inputs.
        return {**self.inputs(r), **{k: UNKNOWN_STRING_VALUE for k in r.outputs if k not in r.inputs}}

    def property_dependencies(self, r: mocks.Registered) -> dict[str, list[str]]:
        """For each input, the recorded dependencies whose values (any output) it was built from."""
        deps = [self.by_urn[u] for u in r.dependencies if u in self.by_urn]
        out = {}
        for key, value in r.inputs.items():
            strings = list(_strings(value))
            urns = [d.urn for d in deps if _found(strings, *self._references(d))] if strings else []
            if urns:
                out[key] = urns
        return out

    def _references(self, d: mocks.Registered) -> tuple[_References, set[str]]:
        """What another resource's value built from ``d`` contains: a computed string, or any output."""
        if d.urn not in self._refs:
            self._refs[d.urn] = (_References(self.computed[d.urn]),
                                 {s for s in _strings(d.outputs) if len(s) >= MIN_REFERENCE_LENGTH})
        return self._refs[d.urn]


def to_struct(props: Mapping[str, Any]) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(json.loads(json.dumps(props, default=str)))
    return s


def as_sent(value: Any) -> Any:
    """``json_format.MessageToDict(to_struct(value))`` without the round trip: what a resource's
    properties are once the engine sent them as a protobuf Struct (every number a float, what JSON
    cannot hold as its text, NaN and infinities refused). ``tests/test_policy.py`` holds it equal to
    the round trip on every resource of every stack and on odd values; two differences stay: keys
    keep the program's order (upb hands them in its own; the tests hold the policies to any order),
    and text protobuf cannot encode (a lone surrogate) passes unchanged where the round trip raises."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is float or kind is int:
        number = float(value)
        if math.isnan(number) or math.isinf(number):
            raise ValueError(f"Fail to serialize {value} for Value.number_value")
        return number
    if isinstance(value, dict):
        return {(k if type(k) is str else _json_key(k)): as_sent(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_sent(v) for v in value]
    if isinstance(value, (str, int, float)):  # a subclass (an enum): what JSON writes for it
        return as_sent(json.loads(json.dumps(value)))
    return str(value)  # to_struct's ``default=str``


def _json_key(key: Any) -> str:
    """A dict key as JSON writes it (``1`` -> ``"1"``, ``True`` -> ``"true"``; other types refused)."""
    return next(iter(json.loads(json.dumps({key: 0}))))


def _received(props: Mapping[str, Any]) -> Any:
    """What pulumi_policy's servicer hands a policy for ``props``, without the protobuf round trip:
    ``unknown_checking_proxy(deserialize_properties(MessageToDict(to_struct(props))))``."""
    return unknown_checking_proxy(deserialize_properties(as_sent(props)))


def _options(r: mocks.Registered) -> PolicyResourceOptions:
    return PolicyResourceOptions(protect=r.protect, ignore_changes=[], delete_before_replace=None, aliases=[],
                                 custom_timeouts=PolicyCustomTimeouts(0, 0, 0), additional_secret_outputs=[],
                                 parent=r.parent or None)


def _provider(wire: Wire, r: mocks.Registered) -> PolicyProviderResource | None:
    urn = getattr(r, "provider", "")
    p = wire.by_urn.get(urn) if urn else None
    if p is None:
        return None
    return PolicyProviderResource(p.type, _received(wire.inputs(p)), p.urn, p.name)


# --- args ----------------------------------------------------------------------------------------

def resource_args(wire: Wire, r: mocks.Registered, config: Mapping | None = None) -> ResourceValidationArgs:
    return ResourceValidationArgs(r.type, _received(wire.inputs(r)), r.urn, r.name, _options(r),
                                  _provider(wire, r), dict(config) if config else None, {})


def stack_args(wire: Wire, config: Mapping | None = None) -> StackValidationArgs:
    """Linked the way ``_PolicyAnalyzerServicer.AnalyzeStack`` links them."""
    resources = {r.urn: PolicyResource(r.type, _received(wire.outputs(r)), r.urn, r.name, _options(r),
                                       _provider(wire, r), None, [], {})
                 for r in wire.graph.resources}
    for r in wire.graph.resources:
        res = resources[r.urn]
        res.parent = resources.get(r.parent)
        res.dependencies.extend(resources[d] for d in r.dependencies if d in resources)
        for key, urns in wire.property_dependencies(r).items():
            res.property_dependencies[key] = [resources[u] for u in urns if u in resources]
    return StackValidationArgs(list(resources.values()), dict(config) if config else None, {})


@contextlib.contextmanager
def stack_config(raw: Mapping | None) -> Iterator[None]:
    """The stack's ``platform`` config as the CLI hands it to a policy pack (PULUMI_CONFIG)."""
    key = f"{PROJECT}:{CONFIG_KEY}"
    config = pulumi.runtime.config.CONFIG.get()
    before = config.get(key)
    if raw is None:
        config.pop(key, None)
    else:
        config[key] = json.dumps(raw)
    try:
        yield
    finally:
        if before is None:
            config.pop(key, None)
        else:
            config[key] = before


def evaluate(graph: mocks.Graph, policies: Iterable = ALL, *, preview: bool = False,
             platform_config: Mapping | None = None, region: str = "us-east-1") -> list[Violation]:
    """Every violation ``policies`` report on ``graph``: resource policies on each custom
    resource's inputs, stack policies once on all outputs."""
    wire = Wire(graph, preview=preview, region=region)
    policies = list(policies)
    found: list[Violation] = []
    with stack_config(platform_config):
        checked = [p for p in policies if isinstance(p, ResourceValidationPolicy)]
        types = None if any(getattr(p, "resource_types", None) is None for p in checked) else \
            {t for p in checked for t in p.resource_types}
        if checked:
            for r in graph.resources:
                if not r.custom or types is not None and r.type not in types:
                    continue
                args = resource_args(wire, r)
                for policy in policies:
                    if isinstance(policy, ResourceValidationPolicy):
                        policy.validate(args, lambda m, u=None, r=r, p=policy: found.append(Violation(p.name, r.urn, m)))
        if any(isinstance(p, StackValidationPolicy) for p in policies):
            args = stack_args(wire)
            for policy in policies:
                if isinstance(policy, StackValidationPolicy):
                    policy.validate(args, lambda m, u=None, p=policy: found.append(Violation(p.name, u or "", m)))
    return found


# --- through pulumi_policy's analyzer servicer ---------------------------------------------------

def _proto_options(r: mocks.Registered) -> analyzer_pb2.AnalyzerResourceOptions:
    return analyzer_pb2.AnalyzerResourceOptions(protect=r.protect, parent=r.parent)


def _proto_provider(wire: Wire, r: mocks.Registered) -> analyzer_pb2.AnalyzerProviderResource | None:
    urn = getattr(r, "provider", "")
    p = wire.by_urn.get(urn) if urn else None
    if p is None:
        return None
    return analyzer_pb2.AnalyzerProviderResource(type=p.type, properties=to_struct(wire.inputs(p)),
                                                 urn=p.urn, name=p.name)


def analyze(graph: mocks.Graph, policies: list = ALL, *, preview: bool = False,
            platform_config: Mapping | None = None, region: str = "us-east-1") -> list[Violation]:
    """The diagnostics pulumi_policy's own servicer returns for ``graph`` (mandatory and advisory
    alike), one ``Analyze`` per custom resource and one ``AnalyzeStack``."""
    wire = Wire(graph, preview=preview, region=region)
    servicer = _PolicyAnalyzerServicer(PACK_NAME, "0.0.1", policies, EnforcementLevel.MANDATORY)
    responses = []
    with stack_config(platform_config):
        for r in graph.resources:
            if r.custom:
                responses.append((r.urn, servicer.Analyze(analyzer_pb2.AnalyzeRequest(
                    type=r.type, properties=to_struct(wire.inputs(r)), urn=r.urn, name=r.name,
                    options=_proto_options(r), provider=_proto_provider(wire, r)), None)))
        stack = []
        for r in graph.resources:
            stack.append(analyzer_pb2.AnalyzerResource(
                type=r.type, properties=to_struct(wire.outputs(r)), urn=r.urn, name=r.name,
                options=_proto_options(r), provider=_proto_provider(wire, r), parent=r.parent,
                dependencies=r.dependencies,
                propertyDependencies={k: analyzer_pb2.AnalyzerPropertyDependencies(urns=v)
                                      for k, v in wire.property_dependencies(r).items()}))
        responses.append(("", servicer.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=stack), None)))
    # A violation's message is the policy's description, a newline, then what the check said; a
    # check that could not run during preview yields one advisory diagnostic naming the policy.
    return [Violation(d.policyName, d.urn or urn, d.message.split("\n", 1)[-1])
            for urn, resp in responses for d in resp.diagnostics]
