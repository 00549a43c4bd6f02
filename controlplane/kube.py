"""Applying and reading objects as one identity: server-side apply, as pulumi-kubernetes v4 does by default
(its provider's ``enableServerSideApply`` is on), so the API server's admission chain sees what a deploy sends."""

from __future__ import annotations

import time
from typing import Callable, Iterable

from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

FIELD_MANAGER = "pulumi-kubernetes"


class Kube:
    def __init__(self, api: client.ApiClient):
        self.api = api
        self._dynamic: DynamicClient | None = None

    @property
    def dynamic(self) -> DynamicClient:
        if self._dynamic is None:
            self._dynamic = DynamicClient(self.api)
        return self._dynamic

    def resource(self, api_version: str, kind: str):
        """The dynamic client's resource of ``kind``, discovery re-read once when it is not known yet."""
        try:
            return self.dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:  # a CRD installed after discovery was cached
            self._dynamic = None
            return self.dynamic.resources.get(api_version=api_version, kind=kind)

    def apply(self, obj: dict) -> dict:
        """Server-side apply of ``obj``; raises ``client.ApiException`` with the API server's refusal."""
        res = self.resource(obj["apiVersion"], obj["kind"])
        md = obj["metadata"]
        out = res.server_side_apply(body=obj, name=md["name"], namespace=md.get("namespace"),
                                    field_manager=FIELD_MANAGER, force_conflicts=True)
        return out.to_dict()

    def create(self, obj: dict) -> dict:
        """Create ``obj`` (no apply); raises ``client.ApiException`` with the API server's refusal."""
        res = self.resource(obj["apiVersion"], obj["kind"])
        return res.create(body=obj, namespace=obj["metadata"].get("namespace")).to_dict()

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """The object, or None when the API server has none of that name."""
        try:
            return self.resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
        except NotFoundError:
            return None

    def list(self, api_version: str, kind: str, namespace: str | None = None, **selectors: str) -> list[dict]:
        """The objects of ``kind`` (in ``namespace``, or all), filtered by ``label_selector=``/``field_selector=``."""
        found = self.resource(api_version, kind).get(namespace=namespace, **selectors)
        return [item.to_dict() for item in found.items]

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None, **body) -> None:
        """Delete the object (``body``: DeleteOptions fields); one already gone is no error."""
        try:
            self.resource(api_version, kind).delete(name=name, namespace=namespace, body=body or None)
        except NotFoundError:
            pass

    def apply_all(self, objs: Iterable[dict]) -> None:
        """``apply`` each object in order."""
        for obj in objs:
            self.apply(obj)


def eventually(what: str, check: Callable[[], object], timeout: float = 60, every: float = 0.5):
    """``check()``'s first truthy result within ``timeout`` seconds, else AssertionError naming ``what``
    and the last result (or error)."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except client.ApiException as e:
            last = f"{e.status} {e.reason}: {e.body}"
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {last!r})")


def refusal(call: Callable[[], object]) -> str | None:
    """The API server's message when ``call`` is refused (4xx), None when it is admitted."""
    try:
        call()
    except client.ApiException as e:
        if 400 <= e.status < 500:
            return f"{e.status}: {e.body}"
        raise
    return None
