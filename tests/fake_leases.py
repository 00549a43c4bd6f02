"""coordination.k8s.io/v1 Leases as the API server keeps them, for the bench tests' fake cluster: the team's
pod-fault Leases exist from the start, free, as the stack renders them (``workloads.render.faults.fault_leases``);
a member's create is refused 403 (its Role has no ``create``, ``render.faults.member_rules``); an update (PUT) of
a missing Lease is 404, one whose ``metadata.resourceVersion`` is not the stored one is 409 Conflict (Kubernetes
API conventions, "Concurrency Control and Consistency"), and every write stores a new resourceVersion.
Thread-safe: the tests run two benches of one team at once."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from kubernetes.client import ApiException

from components.faults import FAULT_LEASE_SECONDS, team_fault_leases


class FakeLeases:
    """The ``CoordinationV1Api`` calls ``bench.lease`` makes; ``writes``: (holder or None, lease) in order,
    ``contended``: set once a read finds the Lease held by a holder other than the one ``reader`` names."""

    def __init__(self, namespaces: tuple[str, ...] = ("team-alpha",)):
        self.leases: dict[tuple[str, str], SimpleNamespace] = {}
        self.version = 0
        for ns in namespaces:  # as the stack renders them: no holder
            for name in team_fault_leases():
                self.leases[(ns, name)] = self._stored({"metadata": {"name": name, "namespace": ns, "labels": {
                    "rendered": "yes"}}, "spec": {"leaseDurationSeconds": FAULT_LEASE_SECONDS}})
        self.writes: list[tuple[str | None, str]] = []
        self.lock = threading.Lock()
        self.contended = threading.Event()
        self.reads_while_held: list[tuple[str, str]] = []
        """(lease, its holder) each time a read found it held: the bench that read it had to wait."""

    def _stored(self, body: dict) -> SimpleNamespace:
        self.version += 1
        spec = body.get("spec") or {}
        return SimpleNamespace(
            metadata=SimpleNamespace(name=body["metadata"]["name"], namespace=body["metadata"]["namespace"],
                                     labels=body["metadata"].get("labels"), resource_version=str(self.version)),
            spec=SimpleNamespace(holder_identity=spec.get("holderIdentity"),
                                 lease_duration_seconds=spec.get("leaseDurationSeconds"),
                                 lease_transitions=spec.get("leaseTransitions"), renew_time=spec.get("renewTime"),
                                 acquire_time=spec.get("acquireTime")))

    def read_namespaced_lease(self, name, namespace):
        with self.lock:
            got = self.leases.get((namespace, name))
            if got is None:
                raise ApiException(status=404, reason="NotFound")
            if got.spec.holder_identity:
                self.reads_while_held.append((name, got.spec.holder_identity))
                self.contended.set()
            return got

    def create_namespaced_lease(self, namespace, body):
        raise ApiException(status=403, reason="Forbidden")  # the member's Role has no create

    def replace_namespaced_lease(self, name, namespace, body):
        with self.lock:
            got = self.leases.get((namespace, name))
            if got is None:
                raise ApiException(status=404, reason="NotFound")
            if body["metadata"].get("resourceVersion") != got.metadata.resource_version:
                raise ApiException(status=409, reason="Conflict")
            self.leases[(namespace, name)] = self._stored(body)
            self.writes.append(((body.get("spec") or {}).get("holderIdentity"), name))
            return self.leases[(namespace, name)]
