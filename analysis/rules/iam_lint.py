"""Every IAM document the stacks emit, linted with parliament against AWS's own definitions of each
service's actions, resource types and condition keys.

The evaluator (``iam_eval``) answers whether a document allows a request, taking the document as
written. The lint finds what leaves a statement inert or refused: an action that does not exist, a
condition key the action's requests never carry (an Allow that never matches, a Deny that never
applies), a resource of a type the actions do not take, a malformed element.

Each document is checked as its kind (``DOCUMENTS``): an identity policy names no Principal; a trust
policy names a Principal and no Resource (its resource is the role, which parliament is handed as
each statement's Resource); a resource policy (bucket, key, endpoint) names a Principal in every
statement. parliament 1.6.4 lints every document as an identity policy: what cannot hold for a kind,
or is wrong for one statement, is listed with its reason in ``iam-lint-justifications.yaml``. Every
other finding, whatever parliament's severity, is a violation. parliament loads its definitions
(10 MB of JSON) once per process, on first use; each (kind, document) is linted once.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .iam_eval import statements
from .view import (BUCKET_POLICY, ENDPOINT_POLICY, IAM_POLICY, KEY_POLICY, KMS_KEY, ROLE, ROLE_POLICY, VPC_ENDPOINT,
                   Resource, as_list)

POLICY_NAME = "iam-documents-valid"
JUSTIFICATIONS = Path(__file__).with_name("iam-lint-justifications.yaml")
IDENTITY, TRUST, BUCKET, KEY, ENDPOINT = "identity", "trust", "bucket", "key", "endpoint"
NAMES_PRINCIPAL = {TRUST, BUCKET, KEY, ENDPOINT}
"""Kinds whose every statement names a Principal: resource-based policies, a role's trust policy
among them; an identity-based policy names none (IAM user guide, "IAM JSON policy elements:
Principal"; VPC user guide, endpoint policies "must contain a Principal element")."""
DOCUMENTS: dict[str, tuple[tuple[str, str], ...]] = {
    ROLE_POLICY: (("policy", IDENTITY),),
    IAM_POLICY: (("policy", IDENTITY),),
    ROLE: (("assumeRolePolicy", TRUST), ("inlinePolicies", IDENTITY)),
    BUCKET_POLICY: (("policy", BUCKET),),
    KEY_POLICY: (("policy", KEY),),
    KMS_KEY: (("policy", KEY),),
    ENDPOINT_POLICY: (("policy", ENDPOINT),),
    VPC_ENDPOINT: (("policy", ENDPOINT),),
}
"""(property, kind) of the IAM documents of each resource type; ``inlinePolicies`` is a list of
``{name, policy}``."""
LISTED = 3
"""Items of a long finding detail (actions without a matching resource) spelt out."""


@dataclass(frozen=True)
class Finding:
    kind: str
    statement: str
    """The statement's Sid, ``#<index>`` without one, or "" for the document as a whole."""
    issue: str
    detail: str

    def __str__(self) -> str:
        where = f"statement {self.statement}" if self.statement else "document"
        return f"{self.kind} policy, {where}: {self.issue}: {self.detail}"


@dataclass(frozen=True)
class Justification:
    issue: str
    kind: str
    statement: str | None
    """None: the issue does not apply to any statement of the kind."""
    reason: str

    def covers(self, finding: Finding) -> bool:
        return (finding.issue, finding.kind) == (self.issue, self.kind) and self.statement in (None, finding.statement)


@functools.cache
def justifications() -> tuple[Justification, ...]:
    data = yaml.safe_load(JUSTIFICATIONS.read_text())
    return tuple(Justification(e["issue"], e["kind"], e.get("statement"), " ".join(e["reason"].split()))
                 for section in ("notApplicable", "justified") for e in data.get(section) or [])


# --- one document ------------------------------------------------------------------------------

def _sid(statement: Mapping, index: int) -> str:
    sid = statement.get("Sid")
    return sid if isinstance(sid, str) and sid else f"#{index}"


def _kind_findings(kind: str, document: Any) -> list[Finding]:
    """What AWS refuses for this kind of document and parliament does not check."""
    out = []
    for n, st in enumerate(statements(document)):
        named = "Principal" in st or "NotPrincipal" in st
        if kind == IDENTITY and named:
            out.append(Finding(kind, _sid(st, n), "PRINCIPAL_IN_IDENTITY_POLICY",
                               "an identity policy names no Principal (IAM refuses the document)"))
        if kind in NAMES_PRINCIPAL and not named:
            out.append(Finding(kind, _sid(st, n), "NO_PRINCIPAL",
                               f"a {kind} policy names a Principal in every statement"))
        if kind == TRUST and ("Resource" in st or "NotResource" in st):
            out.append(Finding(kind, _sid(st, n), "RESOURCE_IN_TRUST_POLICY",
                               "a trust policy's resource is its role (IAM refuses a Resource element)"))
    return out


def _on_role(document: Any, role_arn: str) -> Any:
    """A trust policy with its implied resource, the role, on every statement that names none."""
    if not isinstance(document, Mapping) or not isinstance(document.get("Statement"), list):
        return document
    return {**document, "Statement": [{**st, "Resource": role_arn}
                                      if isinstance(st, Mapping) and "Resource" not in st and "NotResource" not in st
                                      else st for st in document["Statement"]]}


def _detail(finding: Any) -> str:
    """parliament's detail in one line: a sentence, or the first items of a list of actions."""
    detail = finding.detail
    if not isinstance(detail, list):
        return str(detail) if detail else finding.issue.replace("_", " ").lower()
    named = [f"{d.get('action')} (takes {d.get('required_format')})" if isinstance(d, Mapping) else str(d)
             for d in detail[:LISTED]]
    rest = f" and {len(detail) - LISTED} more" if len(detail) > LISTED else ""
    return f"{', '.join(named)}{rest}"


def _parliament(kind: str, text: str) -> list[Finding]:
    import parliament  # loads AWS's definitions: only when a document is linted
    try:
        policy = parliament.analyze_policy_string(text, ignore_private_auditors=True,
                                                  include_community_auditors=False)
    except Exception as err:  # noqa: BLE001 - parliament raises bare Exception on shapes it does not expect
        return [Finding(kind, "", "EXCEPTION", f"parliament could not read it: {err}")]
    by_statement = [(st.sid if isinstance(st.sid, str) and st.sid else f"#{n}", f)
                    for n, st in enumerate(policy.statements) for f in st.findings]
    placed = {id(f) for _, f in by_statement}
    whole = [("", f) for f in policy.findings if id(f) not in placed]
    return [Finding(kind, where, f.issue, _detail(f)) for where, f in whole + by_statement]


@functools.lru_cache(maxsize=4096)
def lint(kind: str, text: str, role_arn: str = "") -> tuple[Finding, ...]:
    """Every finding on one document of ``kind``, justified ones included (``role_arn``: the role
    a trust policy belongs to)."""
    try:
        document = json.loads(text)
    except ValueError as err:
        return (Finding(kind, "", "MALFORMED_JSON", str(err)),)
    if kind == TRUST:
        text = json.dumps(_on_role(document, role_arn))
    return tuple(_kind_findings(kind, document) + _parliament(kind, text))


# --- one resource ------------------------------------------------------------------------------

def documents(type_: str, name: str, props: Mapping) -> list[tuple[str, str, str]]:
    """(property, kind, JSON text) of each IAM document of a resource whose value is known."""
    out = []
    for key, kind in DOCUMENTS.get(type_, ()):
        if key == "inlinePolicies":
            values = [(f"inlinePolicies[{i}]", p.get("policy"))
                      for i, p in enumerate(as_list(props.get(key))) if isinstance(p, Mapping)]
        else:
            values = [(key, props.get(key))]
        out += [(where, kind, text) for where, text in values if isinstance(text, str)]
    return out


def findings(type_: str, name: str, props: Mapping) -> list[tuple[str, Finding]]:
    """(property, finding) of every finding on the resource's documents, justified ones included."""
    role = props.get("arn") if isinstance(props.get("arn"), str) else f"arn:aws:iam::*:role/{name}"
    return [(where, f) for where, kind, text in documents(type_, name, props)
            for f in lint(kind, text, role if kind == TRUST else "")]


def problems(type_: str, name: str, props: Mapping) -> list[str]:
    """The findings no justification covers, one sentence each."""
    return [f"{where} ({f})" for where, f in findings(type_, name, props)
            if not any(j.covers(f) for j in justifications())]


def check_iam_valid(res: Resource) -> list[str]:
    """Every IAM document (identity, trust, bucket, key and endpoint policies) passes parliament's
    lint against AWS's definitions of actions, resource types and condition keys, checked as its
    kind; what does not hold is justified in analysis/rules/iam-lint-justifications.yaml.

    A document still unknown (first preview) is linted when `pulumi up` knows it."""
    return [f"{res.label}: {p}" for p in problems(res.type, res.name, res.props)]
