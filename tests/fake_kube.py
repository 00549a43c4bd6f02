"""An in-memory Kubernetes API server behind the tests' fakes, refusing what the real one refuses.

Objects live at their REST paths. A read, write or delete of an object that is not there answers 404
NotFound; a create of a name that is taken 409 AlreadyExists; a replace or patch carrying a
``metadata.resourceVersion`` other than the object's 409 Conflict (kube-apiserver's optimistic
concurrency: ``k8s.io/apiserver`` ``registry/generic/registry/store.go``). Each write gives the object
a new ``resourceVersion``. A test seeds objects and canned collection answers (``routes``), and may
change an object behind the client's back (``change``) to stage a concurrent writer.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any, Iterable


def split(path: str) -> tuple[str, str | None, str | None]:
    """(collection path, object name, subresource) of a REST path: ``/api/v1/namespaces/a/pods/p/exec``
    is ``("/api/v1/namespaces/a/pods", "p", "exec")``; ``/api/v1/namespaces/a`` is the namespace ``a``."""
    parts = path.strip("/").split("/")
    head = 2 if parts[0] == "api" else 3
    scope, rest = parts[:head], parts[head:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        scope, rest = scope + rest[:2], rest[2:]
    collection = "/" + "/".join(scope + rest[:1])
    return collection, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None


def status(code: int, reason: str, message: str, **details: Any) -> dict:
    """The ``Status`` body of a refusal, as the API server sends it."""
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
            "message": message, "details": details}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (``application/merge-patch+json``): null deletes, lists are replaced."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class ApiServer:
    """Objects by path, seeded by ``objects`` (collection path, object) and ``routes``: ``("GET", path)``
    of an object seeds it, of a collection is its canned listing (whose items are objects too); another
    method on a collection gets its canned answer."""

    def __init__(self, objects: Iterable[tuple[str, dict]] = (), routes: dict | None = None):
        self.routes = routes if routes is not None else {}
        self.objects: dict[str, dict] = {}
        self.deleted: set[str] = set()
        self._versions = itertools.count(100)
        for collection, obj in objects:
            self.put(collection, obj)

    # --- the store --------------------------------------------------------------------------------

    def put(self, collection: str, obj: dict) -> dict:
        """Store ``obj`` in ``collection`` with a new ``resourceVersion``; return the stored copy."""
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {})["resourceVersion"] = str(next(self._versions))
        path = f"{collection}/{obj['metadata']['name']}"
        self.objects[path] = obj
        self.deleted.discard(path)
        return copy.deepcopy(obj)

    def get(self, path: str) -> dict | None:
        """The object at ``path``: as last written, else as seeded by a route (its own, or an item of
        its collection's); None once deleted."""
        if path in self.deleted:
            return None
        if path in self.objects:
            return self.objects[path]
        if ("GET", path) in self.routes:
            return self.routes[("GET", path)]
        collection, name, _ = split(path)
        items = (self.routes.get(("GET", collection)) or {}).get("items", [])
        return next((o for o in items if (o.get("metadata") or {}).get("name") == name), None)

    def change(self, path: str, patch: dict) -> dict:
        """Another writer's merge patch of the object (it gets a new ``resourceVersion``)."""
        collection, _, _ = split(path)
        return self.put(collection, merge_patch(self.get(path), patch))

    # --- the API ----------------------------------------------------------------------------------

    def answer(self, method: str, path: str, body: Any = None) -> tuple[int, dict]:
        """(HTTP status, body) of one request."""
        collection, name, sub = split(path)
        if name is None:
            return self._on_collection(method, collection, body)
        found = self.get(f"{collection}/{name}")
        kind = collection.rsplit("/", 1)[-1]
        if found is None:
            return 404, status(404, "NotFound", f'{kind} "{name}" not found', name=name, kind=kind)
        if sub is not None:  # exec, eviction, status: the object is there; what it does is the test's
            return 200, copy.deepcopy(found)
        if method == "GET":
            return 200, copy.deepcopy(found)
        if method == "DELETE":
            self.objects.pop(f"{collection}/{name}", None)
            self.deleted.add(f"{collection}/{name}")
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": name}}
        wanted = ((body or {}).get("metadata") or {}).get("resourceVersion")
        have = (found.get("metadata") or {}).get("resourceVersion")
        if wanted and have and wanted != have:
            return 409, status(409, "Conflict", f'Operation cannot be fulfilled on {kind} "{name}": the object '
                                                 f"has been modified; please apply your changes to the latest "
                                                 f"version and try again", name=name, kind=kind)
        changed = copy.deepcopy(body) if method == "PUT" else merge_patch(found, body or {})
        changed.setdefault("metadata", {})["name"] = name
        return 200, self.put(collection, changed)

    def _on_collection(self, method: str, collection: str, body: Any) -> tuple[int, dict]:
        if (method, collection) in self.routes:  # a canned answer (a listing, a created object)
            return (201 if method == "POST" else 200), copy.deepcopy(self.routes[(method, collection)])
        if method == "GET":
            prefix = collection + "/"
            return 200, {"items": [copy.deepcopy(o) for p, o in self.objects.items()
                                   if p.startswith(prefix) and "/" not in p[len(prefix):]]}
        if method == "DELETE":  # deletecollection: whatever matches, none included
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        md = (body or {}).get("metadata") or {}
        name = md.get("name") or f"{md.get('generateName', 'x-')}{next(self._versions)}"
        kind = collection.rsplit("/", 1)[-1]
        if self.get(f"{collection}/{name}") is not None:
            return 409, status(409, "AlreadyExists", f'{kind} "{name}" already exists', name=name, kind=kind)
        created = merge_patch(body or {}, {"metadata": {"name": name, "uid": f"uid-{name}"}})
        return 201, self.put(collection, created)
