"""A small IAM policy evaluator: does a document allow or deny one request, statement by statement.

Enough of the IAM policy language for the guardrails to play requests against the documents this
platform writes (IAM user guide, "Policy evaluation logic" and "IAM JSON policy elements:
Condition operators"): Action/NotAction, Resource/NotResource with ``*`` and ``?`` wildcards
(actions case-insensitive), Principal ``*`` or ``{"AWS"|"Service"|"Federated": ...}``, the string,
ARN, Bool and Null operators with ``...IfExists``, and policy variables ``${key}`` in condition
values and resources, and the set operators ``ForAllValues``/``ForAnyValue`` over a multivalued key
given as a list (``aws:TagKeys``). Semantics kept: an explicit Deny wins over any Allow; a condition key absent
from the request makes a positive operator false and a negated one (``...Not...``) true, and
``...IfExists`` true; several keys in one operator, and several operators, must all hold; several
values for one key: any of them. Anything it does not know (another operator) does not match, so a
Deny it cannot read never counts as denying and an Allow never counts as allowing: callers decide
which way round is the safe one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Iterable

ALLOW, DENY = "Allow", "Deny"
VARIABLE = re.compile(r"\$\{([^}]+)\}")


def _list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _glob(pattern: str, value: str, fold: bool = False) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.IGNORECASE if fold else 0) is not None


def _substitute(value: Any, context: Mapping[str, str]) -> str | None:
    """``value`` with ``${key}`` replaced from the request; None when a variable has no value."""
    if not isinstance(value, str):
        return None
    missing = [k for k in VARIABLE.findall(value) if k not in context]
    return None if missing else VARIABLE.sub(lambda m: context[m.group(1)], value)


def _compare(base: str, wanted: str, actual: str) -> bool:
    if base in ("StringEquals", "ArnEquals"):
        return wanted == actual
    if base == "StringEqualsIgnoreCase":
        return wanted.lower() == actual.lower()
    if base in ("StringLike", "ArnLike"):
        return _glob(wanted, actual)
    if base == "Bool":
        return wanted.lower() == actual.lower()
    raise KeyError(base)


NEGATED = {"StringNotEquals": "StringEquals", "StringNotLike": "StringLike", "ArnNotLike": "ArnLike",
           "ArnNotEquals": "ArnEquals", "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase"}
POSITIVE = {"StringEquals", "StringLike", "ArnLike", "ArnEquals", "StringEqualsIgnoreCase", "Bool"}


def condition_holds(condition: Any, context: Mapping[str, str]) -> bool:
    if not condition:
        return True
    if not isinstance(condition, Mapping):
        return False
    for operator, pairs in condition.items():
        if not isinstance(pairs, Mapping):
            return False
        qualifier, _, operator = operator.rpartition(":")
        if qualifier:
            if qualifier not in SET_OPERATORS or not _set_holds(qualifier, operator, pairs, context):
                return False
            continue
        if_exists = operator.endswith("IfExists")
        base = operator[:-len("IfExists")] if if_exists else operator
        for key, values in pairs.items():
            actual = context.get(key)
            if base == "Null":
                if not any(str(v).lower() == str(actual is None).lower() for v in _list(values)):
                    return False
                continue
            if base not in POSITIVE and base not in NEGATED:
                return False
            if actual is None:
                if if_exists or base in NEGATED:
                    continue
                return False
            wanted = [w for w in (_substitute(v, context) for v in _list(values)) if w is not None]
            hit = any(_compare(NEGATED.get(base, base), w, actual) for w in wanted)
            if hit == (base in NEGATED):
                return False
    return True


SET_OPERATORS = ("ForAllValues", "ForAnyValue")


def _set_holds(qualifier: str, operator: str, pairs: Mapping, context: Mapping[str, Any]) -> bool:
    """A multivalued key (``aws:TagKeys``: a list in the request): ``ForAllValues`` holds when every
    value of the request matches one of the policy's (also when the request has none), ``ForAnyValue``
    when at least one does (IAM user guide, "Set operators for multivalued context keys")."""
    base = operator
    if base not in POSITIVE:
        return False
    for key, wanted in pairs.items():
        actual = context.get(key)
        values = [] if actual is None else _list(actual)
        hits = [any(_compare(base, w, str(v)) for w in _list(wanted) if isinstance(w, str)) for v in values]
        if not (all(hits) if qualifier == "ForAllValues" else any(hits)):
            return False
    return True


def _principal_matches(principal: Any, who: Mapping[str, str] | None) -> bool:
    if principal is None or principal == "*" or who is None:
        return True
    if not isinstance(principal, Mapping):
        return False
    return any(_list(principal.get(kind, [])) and (v == "*" or v == name)
               for kind, name in who.items() for v in _list(principal.get(kind, [])))


def statement_applies(st: Mapping, action: str, resource: str, context: Mapping[str, str],
                      principal: Mapping[str, str] | None = None) -> bool:
    if "Action" in st:
        if not any(isinstance(a, str) and _glob(a, action, fold=True) for a in _list(st["Action"])):
            return False
    elif "NotAction" in st:
        if any(isinstance(a, str) and _glob(a, action, fold=True) for a in _list(st["NotAction"])):
            return False
    else:
        return False
    patterns = [_substitute(r, context) for r in _list(st.get("Resource", st.get("NotResource")))]
    hit = any(p is not None and _glob(p, resource) for p in patterns)
    if hit != ("Resource" in st):
        return False
    if ("Principal" in st or "NotPrincipal" in st) and not _principal_matches(st.get("Principal"), principal):
        return False
    return condition_holds(st.get("Condition"), context)


def statements(document: Any) -> list[Mapping]:
    body = document.get("Statement") if isinstance(document, Mapping) else None
    return [s for s in _list(body) if isinstance(s, Mapping)] if body is not None else []


def decide(documents: Iterable[Any], action: str, resource: str, context: Mapping[str, str] | None = None,
           principal: Mapping[str, str] | None = None) -> str | None:
    """``"Deny"`` (an explicit deny applies), ``"Allow"`` or None (nothing applies: implicit deny)."""
    context = context or {}
    applied = {st.get("Effect") for doc in documents for st in statements(doc)
               if statement_applies(st, action, resource, context, principal)}
    return DENY if DENY in applied else ALLOW if ALLOW in applied else None
