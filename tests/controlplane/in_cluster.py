"""The control-plane tier's view from inside the cluster: a platform pod's API access and taints as the API
takes them (shared by the burn-in and pool-resource tests)."""

from __future__ import annotations

from kubernetes import client

from nodes import incluster

from controlplane.kube import eventually


def taint(t) -> dict:
    """A platform taint (``key``, ``value``, ``effect``) as a Node's ``spec.taints`` holds it."""
    return {"key": t.key, "value": t.value, "effect": t.effect}


def pod_api(platform, namespace: str, account: str, node: str | None = None) -> incluster.Api:
    """``nodes.incluster.Api`` as ``account``'s running pod in ``namespace`` (on ``node``) has it: a token
    bound to that pod (the kubelet's projected token) and the cluster's CA."""
    core = client.CoreV1Api(platform.cp.client())
    where = {"field_selector": f"spec.nodeName={node}"} if node else {}
    pod = eventually(f"a pod of {account} on {node or 'any node'}", lambda: next(
        (p for p in core.list_namespaced_pod(namespace, **where).items
         if p.spec.service_account_name == account and p.status.phase == "Running"), None), 60)
    token = platform.cp.root / f"{account}-{pod.metadata.name}.token"
    token.write_text(platform.cp.service_account_token(namespace, account, pod))
    return incluster.Api(platform.cp.url, str(token), str(platform.cp.pki.ca))
