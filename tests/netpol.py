"""What NetworkPolicies open, read as the tests need it (shared by the main suite and the control-plane tier)."""

from __future__ import annotations


def https_blocks(policies: list[dict]) -> set[str]:
    """Every CIDR an egress rule of ``policies`` opens TCP 443 to (a rule with no ports opens every port)."""
    return {peer["ipBlock"]["cidr"] for p in policies for rule in p["spec"].get("egress", [])
            if not rule.get("ports") or any(port.get("port") in (None, 443) for port in rule["ports"])
            for peer in rule.get("to", []) if "ipBlock" in peer}
