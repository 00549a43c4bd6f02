"""Guardrail checks of the cluster's own exposure: the Kubernetes API endpoint not open to the
internet, no implicit cluster-creator admin, no internet-facing load balancer subnets unless the
stack asks for them, and NetworkPolicy enforced in strict mode.

AWS defaults that these checks treat as set when a property is absent (EKS API CreateCluster):
``endpointPublicAccess`` true, ``publicAccessCidrs`` 0.0.0.0/0,
``bootstrapClusterCreatorAdminPermissions`` true.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from components.cluster import STRICT_NETWORK_POLICY
from components.network import PUBLIC_ELB_TAG

from .data import stack_platform_config
from .view import ADDON, SUBNET, UNKNOWN, Resource, dig, parse_json

EKS_CLUSTER = "aws:eks/cluster:Cluster"


def _opted_in(*path: str) -> bool:
    """The stack file sets ``path`` to a true value (the schema has checked what it may be)."""
    return bool(dig(stack_platform_config(), *path))


def _anywhere(cidr: Any) -> bool:
    try:
        return ipaddress.ip_network(str(cidr), strict=False).prefixlen == 0
    except ValueError:
        return False


def check_api_endpoint_not_public(res: Resource) -> list[str]:
    """A public API endpoint names the networks that may reach it and none of them is /0, unless
    the stack opts in by name (``cluster.publicAccessFromAnywhere``)."""
    vpc = res.props.get("vpcConfig")
    if vpc is UNKNOWN or not isinstance(vpc, Mapping) or vpc.get("endpointPublicAccess") is False:
        return []
    cidrs = vpc.get("publicAccessCidrs")
    if cidrs is UNKNOWN:
        return []
    open_to = [c for c in (cidrs or []) if _anywhere(c)] if cidrs else ["0.0.0.0/0 (the default of an empty list)"]
    if not open_to or _opted_in("cluster", "publicAccessFromAnywhere"):
        return []
    return [f"{res.label}: the public API endpoint admits {', '.join(map(str, open_to))}; list the networks "
            f"that may reach it or turn endpointPublicAccess off"]


def check_creator_not_admin(res: Resource) -> list[str]:
    """Cluster admins are access entries of the graph: no implicit admin for the creator."""
    access = res.props.get("accessConfig")
    flag = access.get("bootstrapClusterCreatorAdminPermissions") if isinstance(access, Mapping) else None
    if flag is False or flag is UNKNOWN or access is UNKNOWN:
        return []
    return [f"{res.label}: accessConfig.bootstrapClusterCreatorAdminPermissions is {flag}, so the creator is "
            f"a cluster admin outside this graph; set it to false and name admins as access entries"]


def check_no_public_elb_subnet(res: Resource) -> list[str]:
    """No subnet offers itself to internet-facing load balancers unless the stack asks
    (``network.publicLoadBalancers``)."""
    tags = res.props.get("tags")
    if not isinstance(tags, Mapping) or PUBLIC_ELB_TAG not in tags or _opted_in("network", "publicLoadBalancers"):
        return []
    return [f"{res.label}: tagged {PUBLIC_ELB_TAG}, so Services of type LoadBalancer get internet-facing load "
            f"balancers here; only a stack with network.publicLoadBalancers: true may"]


def check_network_policy_strict(res: Resource) -> list[str]:
    """The VPC CNI enforces NetworkPolicy, in strict mode (a new pod starts denied, not allowed)."""
    if res.props.get("addonName") != "vpc-cni":
        return []
    values = parse_json(res.props.get("configurationValues"))
    if values is UNKNOWN:
        return []
    enabled = dig(values, "enableNetworkPolicy")
    mode = dig(values, "env", "NETWORK_POLICY_ENFORCING_MODE")
    if str(enabled).lower() == "true" and str(mode).lower() == STRICT_NETWORK_POLICY:
        return []
    return [f"{res.label}: configurationValues set enableNetworkPolicy {enabled!r} and "
            f"NETWORK_POLICY_ENFORCING_MODE {mode!r}; NetworkPolicy must be on and {STRICT_NETWORK_POLICY}, "
            f"or new pods start with all traffic allowed"]


POLICIES = [
    ("api-endpoint-not-public",
     "The EKS API endpoint is private or public to named networks only, never 0.0.0.0/0 unless the stack "
     "opts in with cluster.publicAccessFromAnywhere.", [EKS_CLUSTER], check_api_endpoint_not_public),
    ("no-implicit-cluster-admin",
     "The cluster creator gets no implicit admin access (bootstrapClusterCreatorAdminPermissions false).",
     [EKS_CLUSTER], check_creator_not_admin),
    ("no-public-load-balancer-subnets",
     "No subnet carries kubernetes.io/role/elb unless the stack sets network.publicLoadBalancers.",
     [SUBNET], check_no_public_elb_subnet),
    ("network-policy-strict",
     "The VPC CNI add-on enforces NetworkPolicy in strict mode.", [ADDON], check_network_policy_strict),
]
"""(name, description, resource types, check) of each resource policy; ``policy/rules.py`` wraps them."""
