"""The few Kubernetes API calls the burn-in agent makes from its pod, with the standard library only
(the workload image has no Kubernetes client): read its node and the pods on it, merge-patch the
node, create an Event; for the controller also list nodes, evict pods, keep its ConfigMap and the pods
that check a lone new node from a proven one (``nodes.pairs``).

Authenticates with the pod's projected service-account token and CA (read again on every call: the
kubelet rotates the token) at ``KUBERNETES_SERVICE_HOST``/``PORT``. A non-2xx answer raises
``ApiError`` with the status, so a refused write (409 conflict, 403 from the admission policy) is
never mistaken for a written result.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Mapping

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class ApiError(Exception):
    def __init__(self, status: int, body: str):
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status


class Api:
    def __init__(self, base: str | None = None, token_file: str = f"{SA_DIR}/token",
                 ca_file: str | None = f"{SA_DIR}/ca.crt"):
        if base is None:
            base = f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ.get('KUBERNETES_SERVICE_PORT', '443')}"
        self.base, self.token_file = base.rstrip("/"), token_file
        self.context = ssl.create_default_context(cafile=ca_file) if base.startswith("https") else None

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None,
              content_type: str = "application/json") -> dict:
        headers = {"Accept": "application/json"}
        if os.path.exists(self.token_file):
            with open(self.token_file) as f:
                headers["Authorization"] = f"Bearer {f.read().strip()}"
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), content_type
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.context) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, e.read().decode(errors="replace")) from None

    def node(self, name: str) -> dict:
        return self._call("GET", f"/api/v1/nodes/{name}")

    def pods_on(self, node: str) -> list[dict]:
        """Every pod on ``node``, in every namespace."""
        return self._call("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}").get("items", [])

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> dict:
        return self._call("PATCH", f"/api/v1/nodes/{name}", patch, "application/merge-patch+json")

    def patch_node_status(self, name: str, patch: Mapping[str, Any]) -> dict:
        """A merge patch of the node's ``status`` subresource (``nodes.advertise``)."""
        return self._call("PATCH", f"/api/v1/nodes/{name}/status", patch, "application/merge-patch+json")

    def record(self, node: Mapping[str, Any], patch_of: Callable[[Mapping[str, Any]], dict], tries: int = 3) -> dict | None:
        """``patch_of(node)`` merge-patched on the node (the patch carries the ``resourceVersion`` it was
        made from); on a 409 (written by another since it was read) made again from a fresh read; None
        when the node is gone (404)."""
        name = node["metadata"]["name"]
        for attempt in range(tries):
            try:
                return self.patch_node(name, patch_of(self.node(name) if attempt else node))
            except ApiError as e:
                if e.status == 404:
                    return None
                if e.status != 409 or attempt == tries - 1:
                    raise
        return None

    def create_event(self, event: Mapping[str, Any]) -> dict:
        return self._call("POST", f"/api/v1/namespaces/{event['metadata']['namespace']}/events", event)

    def evict(self, namespace: str, name: str) -> dict:
        """The Eviction API (policy/v1 ``Eviction`` to the pod's ``eviction`` subresource): the pod goes
        through graceful termination unless its disruption budget refuses (429)."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        return self._call("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body)

    def pod(self, namespace: str, name: str) -> dict | None:
        try:
            return self._call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def pods(self, namespace: str, selector: str) -> list[dict]:
        return self._call("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector="
                                 f"{urllib.parse.quote(selector)}").get("items", [])

    def create_pod(self, pod: Mapping[str, Any]) -> dict:
        return self._call("POST", f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod)

    def delete_pod(self, namespace: str, name: str) -> None:
        try:
            self._call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except ApiError as e:
            if e.status != 404:
                raise

    def nodes(self, selector: str) -> list[dict]:
        return self._call("GET", f"/api/v1/nodes?labelSelector={urllib.parse.quote(selector)}").get("items", [])

    def config_map(self, namespace: str, name: str) -> dict | None:
        try:
            return self._call("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def save_config_map(self, cm: Mapping[str, Any]) -> dict:
        """Create it, or replace it (PUT with its ``resourceVersion``: a stale copy is refused, 409)."""
        md = cm["metadata"]
        if md.get("resourceVersion"):
            return self._call("PUT", f"/api/v1/namespaces/{md['namespace']}/configmaps/{md['name']}", cm)
        return self._call("POST", f"/api/v1/namespaces/{md['namespace']}/configmaps", cm)
