"""A team-wide mutex for one pod fault at a time per worker group: the coordination.k8s.io/v1 Lease
``components.faults.fault_lease(group)`` in the team namespace, held by one attempt from labelling its pod to
FIS' resolution of the target (``bench.faults``). The stack renders each such Lease, without a holder, with
the team namespace (``workloads.render.faults.fault_rbac``); a member may only read and update it, never
create one (a create's name cannot be narrowed by RBAC, and the team's Lease quota is exactly the rendered
ones), so this module only updates it: a missing Lease is ``LeaseMissing``.

Semantics relied on, as client-go's leader election uses a Lease (client-go v0.34.10
``tools/leaderelection/leaderelection.go:420-488`` ``tryAcquireOrRenew``, ``:308-340`` ``release``,
``:518-520`` ``isLeaseValid``; ``resourcelock/leaselock.go:57-94``):

- an update (PUT) carrying ``metadata.resourceVersion`` fails 409 Conflict when the object changed since that
  version was read (Kubernetes API conventions, kubernetes/community
  ``contributors/devel/sig-architecture/api-conventions.md``, "Concurrency Control and Consistency"): of two
  attempts taking over the same free or stale Lease one wins, and a holder's renewal fails once another took it;
- ``spec.holderIdentity`` empty is a free Lease (client-go's ``release`` writes one without a holder);
- ``spec.leaseDurationSeconds`` bounds a crashed holder: a Lease whose version this bench has seen unchanged
  for that long, by its own clock (client-go's ``observedTime``, never the holder's ``renewTime``, so clocks
  need not agree), is stale and may be taken over. Unlike client-go, which trusts the duration the holder
  wrote (``isLeaseValid``, ``:518-520``), the holder's own ``leaseDurationSeconds`` is capped at the
  platform's ``FAULT_LEASE_SECONDS`` (commit e2fa6a2): a teammate's Lease written with a huge duration would
  otherwise starve every other bench of the team until its deadline.

Guarantees: ``acquire`` returns holding the Lease (taken free or stale by an update at the version read) or
raises ``Overdue`` past its wait, or ``LeaseMissing`` when the stack did not render it; an API error other than
those 404s and 409s goes on as the ``ApiException`` (``bench.faults`` makes it a ``FaultError``); ``renew``
raises ``LeaseLost`` unless this holder still holds it; ``release`` frees it only if this holder still holds it
at the version it last wrote. What it does not guarantee (no lease does, without a fencing token the FIS
selector cannot carry): a holder stopped for longer than ``leaseDurationSeconds`` between two of its calls may
act after another took over; ``bench.faults`` renews right before it acts and checks the labels and FIS'
resolved target around it.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from kubernetes.client import ApiException

from components.faults import FAULT_LEASE_SECONDS

from .deadlines import CLOCK, Overdue

CONFLICT, NOT_FOUND = 409, 404


_NO_SPEC = SimpleNamespace(holder_identity=None, lease_duration_seconds=None, lease_transitions=None)
"""A Lease without a spec: free."""


class LeaseLost(LookupError):
    """The Lease is no longer this holder's (another took it over, or it is gone)."""


class LeaseMissing(LookupError):
    """The Lease does not exist: the stack renders it (``workloads.render.faults.fault_rbac``)."""


def _micro(at) -> str:
    """A Kubernetes ``MicroTime`` (RFC 3339 with microseconds, UTC)."""
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class TeamLease:
    """The Lease ``name`` in ``namespace`` for ``holder`` (the attempt), through ``api`` (a
    ``kubernetes.client.CoordinationV1Api``)."""

    api: object
    namespace: str
    name: str
    holder: str
    duration_s: int = FAULT_LEASE_SECONDS
    version: str | None = None
    """The resourceVersion of this holder's last write while it holds the Lease; None when it does not."""
    transitions: int = 0
    labels: dict | None = None
    """The rendered Lease's labels, as read: every update (a PUT replaces the object) keeps them."""

    def _body(self, holder: str | None, version: str) -> dict:
        now = _micro(CLOCK.now())
        spec = {"leaseDurationSeconds": self.duration_s, "leaseTransitions": self.transitions,
                **({"holderIdentity": holder, "acquireTime": now, "renewTime": now} if holder else {})}
        md = {"name": self.name, "namespace": self.namespace, "resourceVersion": version,
              **({"labels": self.labels} if self.labels else {})}
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": md, "spec": spec}

    def _read(self):
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as err:
            if err.status == NOT_FOUND:
                raise LeaseMissing(f"Lease {self.namespace}/{self.name} does not exist: the stack renders it with the "
                                   f"team namespace (workloads.faultInjection, workloads.render.faults); deploy it") from None
            raise
        self.labels = getattr(lease.metadata, "labels", None)
        return lease

    def _write(self, version: str, holder: str | None):
        """Update at ``version``; the Lease written, or None on 409 (another wrote it since)."""
        try:
            return self.api.replace_namespaced_lease(self.name, self.namespace, self._body(holder, version))
        except ApiException as err:
            if err.status == CONFLICT:
                return None
            raise

    def acquire(self, wait_s: float, poll_s: float) -> None:
        """Hold the Lease: take it when free or stale; ``Overdue`` after ``wait_s``; ``LeaseMissing``."""
        deadline, seen = CLOCK.monotonic() + wait_s, None
        while True:
            lease = self._read()
            version, spec = lease.metadata.resource_version, lease.spec or _NO_SPEC
            if seen is None or seen[0] != version:
                seen = (version, CLOCK.monotonic())  # client-go's observedTime: this bench's own clock
            # Never trust a holder's own duration beyond ours: a teammate's Lease written with a huge
            # leaseDurationSeconds would otherwise starve every other bench of the team until its deadline.
            stale = CLOCK.monotonic() - seen[1] >= min(spec.lease_duration_seconds or self.duration_s, self.duration_s)
            got = None
            if not spec.holder_identity or stale:
                self.transitions = (spec.lease_transitions or 0) + 1
                got = self._write(version, self.holder)
            if got is not None:
                self.version = got.metadata.resource_version
                return
            if CLOCK.monotonic() > deadline:
                holder = spec.holder_identity or "another attempt"
                raise Overdue(f"Lease {self.namespace}/{self.name} still held by {holder} after {wait_s:.0f} s "
                              f"(one pod fault of a group at a time in a team; the FIS deadline, bench.deadlines)")
            CLOCK.sleep(poll_s)

    def renew(self) -> None:
        """Write the Lease again at the version this holder last wrote; ``LeaseLost`` if another wrote since."""
        if self.version is None:
            raise LeaseLost(f"Lease {self.namespace}/{self.name} is not held by {self.holder}")
        got = self._write(self.version, self.holder)
        if got is None:
            self.version = None
            raise LeaseLost(f"Lease {self.namespace}/{self.name} was taken over from {self.holder} (it was not "
                            f"renewed within {self.duration_s} s)")
        self.version = got.metadata.resource_version

    def release(self) -> str:
        """Free the Lease if this holder still holds it (an update without a holder); what was done."""
        if self.version is None:
            return f"Lease {self.namespace}/{self.name} not held"
        version, self.version = self.version, None
        if self._write(version, None) is None:
            return f"Lease {self.namespace}/{self.name} was taken over before its release"
        return f"released Lease {self.namespace}/{self.name}"
