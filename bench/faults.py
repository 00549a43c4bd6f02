"""Faults injected into a running attempt through AWS Fault Injection Service (FIS), with the
experiment templates the stack creates (``components.faults``): aimed at exactly this attempt, checked
before the first attempt, and recorded with FIS' own times and targets.

Why FIS and not the Kubernetes API: the bench user is a team member (``render.teams.SUBMITTER_RULES``:
no pod delete, no node patch, no evictions, no cluster-wide pod list: 403), and a drain is refused by
the platform's own ``runs`` PodDisruptionBudget (maxUnavailable 0: every eviction of a run pod is
answered 429 TooManyRequests, Kubernetes ``pkg/registry/core/pod/storage/eviction.go``), so neither is
a fault the bench can or should inject. FIS is the field's engine: the stack creates one template
per fault and team, its own role acts, and the bench user only starts them (``fis:StartExperiment`` on
its team's templates, the IAM policy ``components.faults`` outputs). Every fault is a crash:

- ``delete-rollout-pod`` / ``delete-trainer-pod``: ``aws:eks:pod-delete`` with ``gracePeriodSeconds``
  0 on one pod of the attempt's ``rollout`` / ``trainer`` group (FIS User Guide, actions reference,
  "aws:eks:pod-delete"): SIGKILL, no preStop hook, so no save-on-stop checkpoint
  (``render.runs.SAVE_ON_STOP``) runs. The team's template is fixed and selects ``FAULT_TARGET_LABEL`` =
  the group in the team namespace; no pod carries that label unless a bench puts it there. The bench
  takes the group's Lease (``components.faults.fault_lease``, ``bench.lease``: one holder in the team,
  a crashed one freed after ``FAULT_LEASE_SECONDS``), checks that no pod carries the label, labels the
  first running pod of the attempt's group (a merge patch of that one label, which the member's Role
  and the team pod policy allow, ``render.faults.member_rules``, ``render.pod_rules.member_pod_update``),
  renews the Lease and checks that this pod alone carries the label, starts FIS, renews the Lease at
  every poll until the experiment ended, and then removes the label and frees the Lease. So two benches
  of a team that both take the Lease never label at once and FIS never resolves to the other's pod. A
  pod labelled by hand by someone who ignores the Lease is caught by the checks before (refused,
  nothing injected) or by the check of FIS' resolved target after (the attempt INCOMPLETE);
- ``terminate-gpu-node``: ``aws:ec2:terminate-instances`` on the EC2 instance of one rollout pod's
  node, tagged ``FAULT_TAG`` with a value of its own (``components.faults.fault_tag``) just before,
  the cluster's template pointed at that value (``UpdateExperimentTemplate``), and the started
  experiment's target read back to be that value (another operator's update in between: stopped).

After each fault FIS' resolved targets (``ListExperimentResolvedTargets``) must be the attempt's pod or
the tagged instance, else ``FaultError`` (the report would otherwise call a teammate's crash
"survived"). The record keeps FIS' own time of the action (``GetExperiment`` ``actions.<name>.startTime``),
from which the report times the fault (``bench.recovery``). The API shapes are botocore 1.44.18's
``botocore/data/fis/2020-12-01/service-2.json`` (``ExperimentAction.startTime``,
``StartExperimentExperimentOptionsInput.actionsMode``, ``ResolvedTarget.targetInformation``).

``preflight``, before anything is submitted: each template the experiment will start is started as
FIS' target preview (``experimentOptions.actionsMode: skip-all``: FIS User Guide, "Generate a target
preview from an experiment template": the experiment runs no action), which the bench user's
``fis:StartExperiment`` must allow; for a node fault also EC2's ``CreateTags`` with ``DryRun`` on a node
of the pool and a no-change ``UpdateExperimentTemplate``; for a pod fault that Kubernetes RBAC lets the
member read and update the group's Lease and patch pods (``SelfSubjectAccessReview``). A refusal (AccessDenied, UnauthorizedOperation)
is a ``FaultError`` naming the policy to attach, before the first attempt rather than hours in.

Each kind's action and group are data (``stackconfig/faults.yaml``, ``stackconfig.faults``).
Guarantees: every fault returns its record or raises ``FaultError`` naming what failed (a Kubernetes API
error in a pod fault's Lease, label or pod-list step included, and a Lease the stack did not render); an FIS
experiment that does not finish within the wait given (``bench.deadlines``: the experiment's step
time), or a Lease still held by another after that wait, is ``Overdue``; ``Injector.undo`` stops an
experiment still running, removes the tag and the label and frees the Lease (called by ``inject`` on
every path out, and by the runner): after a stop the Lease is left to expire (``FAULT_LEASE_SECONDS``),
since the stopped experiment is not seen finished. Not guaranteed (no lease can without a fencing token
the fixed selector cannot carry): a bench stopped for longer than the Lease's duration between renewing
and labelling may label after another took the Lease, and the other's FIS may then hit its pod; both attempts
then end INCOMPLETE (its renewal raises ``LeaseLost``; the other's checks see two labels or a foreign target).
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field

from kubernetes.client import ApiException

from workloads.render.common import RAY_GROUP_LABEL
from workloads.render.faults import MEMBER_ROLE
from workloads.render.runs import ATTEMPT_LABEL, RUN_LABEL
from workloads.render.teams import namespace_of
from workloads.cli.runs_client import RunClient

from .cloudwatch import instance_id
from .deadlines import CLOCK, Overdue
from .lease import LeaseLost, LeaseMissing, TeamLease
from components.faults import (FAULT_KIND_TAG, FAULT_TAG, FAULT_TARGET_LABEL, CLUSTER_TAG, TEAM_TAG, fault_lease,
                               fault_tag, terminate_template)
from stackconfig.faults import fault_kind
from stackconfig.labels import POOL_LABEL

DONE = {"completed", "stopped", "failed", "cancelled"}
"""FIS experiment states that do no more (FIS API ``ExperimentStatus``)."""
REFUSED = ("AccessDenied", "UnauthorizedOperation")
"""Error codes of an identity that may not (FIS ``AccessDeniedException``, EC2 ``UnauthorizedOperation``)."""


class FaultError(LookupError):
    """A fault that could not be injected, or hit something else; the message says what and why."""


def _code(err: Exception) -> str:
    return str((getattr(err, "response", None) or {}).get("Error", {}).get("Code", ""))


@contextmanager
def _kube(what: str):
    """A Kubernetes API error (other than those the caller answers) or a missing Lease inside a pod fault's
    lease, label or pod-list step: ``FaultError`` naming the call, so the attempt is INCOMPLETE and the
    experiment goes on (a teammate's or the API server's refusal does not stop the whole bench)."""
    try:
        yield
    except ApiException as err:
        raise FaultError(f"{what}: the Kubernetes API answered {err.status} {err.reason}") from None
    except LeaseMissing as err:
        raise FaultError(str(err)) from None


def _pods(api: RunClient, team: str, selector: str) -> list:
    with _kube(f"list pods {selector} in {namespace_of(team)}"):
        return api.core.list_namespaced_pod(namespace_of(team), label_selector=selector).items


def _running(pods: list) -> list:
    return sorted((p for p in pods if p.status and p.status.phase == "Running"), key=lambda p: p.metadata.name)


def _attempt_of(rayjob: str) -> str:
    return rayjob.rsplit("-", 1)[1]


@dataclass
class Injector:
    """Starts the stack's FIS templates with the bench user's AWS identity (``fis`` and ``ec2``: boto3
    clients) and keeps what it must undo."""

    fis: object
    ec2: object
    cluster: str
    poll_s: float = 5.0
    running: list[str] = field(default_factory=list)
    tagged: list[str] = field(default_factory=list)
    labelled: tuple | None = None
    """(RunClient, namespace, pod) while a pod carries ``FAULT_TARGET_LABEL`` for this injector."""
    lease: TeamLease | None = None
    """The group's Lease while this injector holds it (``bench.lease``)."""
    undone: list[str] = field(default_factory=list)
    """What an ``inject`` that failed undid on its way out, for the next ``undo`` to report."""

    def template(self, kind: str, team: str) -> str:
        """The id of the stack's template for ``kind`` (and ``team`` for pod faults), found by its tags."""
        want = {CLUSTER_TAG: self.cluster, FAULT_KIND_TAG: kind}
        if fault_kind(kind).per_team:
            want[TEAM_TAG] = team
        found, token = [], None
        while True:
            page = self.fis.list_experiment_templates(**({"nextToken": token} if token else {}))
            found += [t["id"] for t in page.get("experimentTemplates", [])
                      if all((t.get("tags") or {}).get(k) == v for k, v in want.items())]
            token = page.get("nextToken")
            if not token:
                break
        if len(found) != 1:
            raise FaultError(f"{kind}: {len(found)} FIS experiment templates tagged {want} (expected 1: "
                             f"deploy the stack with faults enabled, components.faults)")
        return found[0]

    def preflight(self, api: RunClient, exp, attempts: list) -> list[str]:
        """Whether the bench user may start every fault the attempts plan (see the module); what was checked."""
        done = []
        for kind, team in sorted({(f.kind, a.run.team) for a in attempts for f in exp.arm(a.arm).faults}):
            template = self.template(kind, team)
            policy = "nodePolicy" if fault_kind(kind).removes_node else f"teamPolicies.{team}"
            self._may(f"{kind}: start FIS template {template}", policy, lambda: self.fis.start_experiment(
                experimentTemplateId=template, experimentOptions={"actionsMode": "skip-all"},
                tags={"rl.platform/preflight": kind, TEAM_TAG: team}))
            if fault_kind(kind).removes_node:
                self._node_rights(api, kind, template, policy)
            else:
                self._pod_rights(api, kind, team)
            done.append(f"{kind}: the bench user may start template {template} (FIS target preview, skip-all)")
        return done

    def _node_rights(self, api: RunClient, kind: str, template: str, policy: str) -> None:
        nodes = api.core.list_node(label_selector=f"{POOL_LABEL}={fault_kind(kind).group}").items
        if not nodes:
            raise FaultError(f"{kind}: no node of pool {fault_kind(kind).group} to check the tag right on")
        iid = instance_id(api.core.api_client.sanitize_for_serialization(nodes[0])["spec"]["providerID"])
        try:
            self.ec2.create_tags(Resources=[iid], Tags=[{"Key": FAULT_TAG, "Value": fault_tag(self.cluster, "preflight")}],
                                 DryRun=True)
        except Exception as err:  # botocore ClientError: DryRunOperation is the answer of an allowed call
            if _code(err) != "DryRunOperation":
                self._refused(err, f"{kind}: tag instance {iid} with {FAULT_TAG}", policy)
        self._may(f"{kind}: point FIS template {template} at a fault's tag", policy,
                  lambda: self._aim(template, terminate_template(self.cluster)))

    def _pod_rights(self, api: RunClient, kind: str, team: str) -> None:
        """The member may take the group's Lease and label a pod (SelfSubjectAccessReview, authorization/v1)."""
        ns, lease = namespace_of(team), fault_lease(fault_kind(kind).group)
        for verb, group, resource, name in (("get", "coordination.k8s.io", "leases", lease),
                                            ("update", "coordination.k8s.io", "leases", lease), ("patch", "", "pods", "")):
            review = api.authorization.create_self_subject_access_review({
                "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": {
                    "namespace": ns, "verb": verb, "group": group, "resource": resource, "name": name}}})
            if not review.status.allowed:
                raise FaultError(f"{kind}: the bench user may not {verb} {resource}{'/' + name if name else ''} in {ns} "
                                 f"(Kubernetes RBAC): the stack renders Role {MEMBER_ROLE} for the team's members with "
                                 f"workloads.faultInjection (workloads.render.faults); deploy it")

    def _may(self, what: str, policy: str, call) -> None:
        try:
            call()
        except Exception as err:  # botocore ClientError
            self._refused(err, what, policy)

    def _refused(self, err: Exception, what: str, policy: str) -> None:
        if any(code in _code(err) for code in REFUSED):
            raise FaultError(f"{what}: refused ({_code(err)}) for the bench user's AWS identity: attach the stack "
                             f"output benchFaults.{policy} to it (docs/design/benchmark.md, Identity)") from None
        raise err

    def _aim(self, template: str, spec: dict) -> None:
        """Point the template's ``node`` target at ``spec``'s tag (UpdateExperimentTemplate)."""
        t = spec["targets"][0]
        self.fis.update_experiment_template(id=template, targets={t["name"]: {
            "resourceType": t["resource_type"], "selectionMode": t["selection_mode"],
            "resourceTags": {x["key"]: x["value"] for x in t["resource_tags"]}, "filters": [
                {"path": f["path"], "values": f["values"]} for f in t["filters"]]}})

    def inject(self, api: RunClient, kind: str, team: str, run: str, rayjob: str, wait_s: float) -> dict:
        """Inject one fault into the attempt ``rayjob``'s current pods and wait (``wait_s``) for FIS to
        finish it; a record for ``faults.json``. On every way out the experiment is stopped if still running,
        the tag and the label removed and the Lease released (``undo``)."""
        spec = fault_kind(kind)
        pods = _running(_pods(api, team, f"{RUN_LABEL}={run},{ATTEMPT_LABEL}={_attempt_of(rayjob)},"
                                         f"{RAY_GROUP_LABEL}={spec.group}"))
        if not pods:
            raise FaultError(f"run {run}: no running pod of group {spec.group} to inject {kind} into")
        template = self.template(kind, team)
        record = {"kind": kind, "group": spec.group, "template": template,
                  "podsBefore": [p.metadata.name for p in pods]}
        try:
            self._inject(api, spec, team, run, rayjob, pods[0], template, record, wait_s)
        except BaseException:
            try:
                self.undone += self.undo()
            except Exception as err:  # noqa: BLE001 (the fault's own error goes on; the runner reports this)
                self.undone.append(f"NOT undone: {type(err).__name__}: {err}")
            raise
        self.undo()  # nothing runs any more: the tag or the label removed, the Lease released
        return record

    def _inject(self, api: RunClient, spec, team: str, run: str, rayjob: str, pod, template: str, record: dict,
                wait_s: float) -> None:
        if spec.removes_node:
            ours = self._tag_node(api, pod, template, record)
        else:
            ours = self._mark(api, team, spec.group, pod, rayjob, record, wait_s)
            self._renew()  # still the holder right before FIS acts
        record["injectedAt"] = CLOCK.now().isoformat()
        exp = self.fis.start_experiment(experimentTemplateId=template, tags={RUN_LABEL: run, TEAM_TAG: team})["experiment"]
        self.running.append(exp["id"])
        record["experiment"] = exp["id"]
        if spec.removes_node:
            self._check_aim(exp["id"], record["tag"])
        state = self._wait(exp["id"], wait_s)
        self.running.remove(exp["id"])
        if state["state"].get("status") != "completed":
            raise FaultError(f"{spec.name}: FIS experiment {exp['id']} ended {state['state'].get('status')}: "
                             f"{state['state'].get('reason', 'no reason given')}")
        record["actionStartedAt"] = _iso(min((a["startTime"] for a in (state.get("actions") or {}).values()
                                              if a.get("startTime")), default=None))
        record["hit"] = self._hit(exp["id"], ours, spec.name)

    def _tag_node(self, api: RunClient, pod, template: str, record: dict) -> set[str]:
        node = pod.spec.node_name
        iid = instance_id(api.core.api_client.sanitize_for_serialization(api.core.read_node(node))["spec"]["providerID"])
        value = fault_tag(self.cluster, uuid.uuid4().hex[:12])
        self.ec2.create_tags(Resources=[iid], Tags=[{"Key": FAULT_TAG, "Value": value}])
        self.tagged.append(iid)
        self._aim(template, terminate_template(self.cluster, value.split(":", 1)[1]))
        record |= {"target": f"node/{node} ({iid})", "tag": value}
        return {iid}

    def _mark(self, api: RunClient, team: str, group: str, pod, rayjob: str, record: dict, wait_s: float) -> set[str]:
        """Hold the group's Lease, then label ``pod`` for the team's fixed template; the pods it may hit."""
        ns, name = namespace_of(team), pod.metadata.name
        self.lease = TeamLease(api.coordination, ns, fault_lease(group), rayjob)
        with _kube(f"take Lease {ns}/{self.lease.name}"):
            self.lease.acquire(wait_s, self.poll_s)
        self._only(api, team, group, set(), record["kind"])
        with _kube(f"label pod {ns}/{name} {FAULT_TARGET_LABEL}={group}"):
            api.core.patch_namespaced_pod(name, ns, {"metadata": {"labels": {FAULT_TARGET_LABEL: group}}})
        self.labelled = (api, ns, name)
        self._renew()  # another took the Lease while this one labelled: its pod may be labelled too
        self._only(api, team, group, {name}, record["kind"])
        record["target"] = f"pod {name} of group {group} (label {FAULT_TARGET_LABEL}, Lease {ns}/{self.lease.name})"
        return {name}

    def _only(self, api: RunClient, team: str, group: str, want: set[str], kind: str) -> None:
        """Exactly ``want`` carries the label in the team namespace (pods others labelled: ``FaultError``)."""
        got = {p.metadata.name for p in _pods(api, team, f"{FAULT_TARGET_LABEL}={group}")}
        if got - want:
            others = ", ".join(sorted(got - want)[:3])
            raise FaultError(f"{kind}: pods not labelled by this attempt carry {FAULT_TARGET_LABEL}={group} in "
                             f"{namespace_of(team)} ({others}): FIS could hit them; not injected (labelled by hand or "
                             f"by a bench that crashed: kubectl label pod -n {namespace_of(team)} <pod> {FAULT_TARGET_LABEL}-)")
        if want - got:
            raise FaultError(f"{kind}: pod {', '.join(sorted(want - got))} lost its label {FAULT_TARGET_LABEL}={group} "
                             f"before FIS started; not injected")

    def _renew(self) -> None:
        try:
            with _kube(f"renew Lease {self.lease.namespace}/{self.lease.name}"):
                self.lease.renew()
        except LeaseLost as err:
            raise FaultError(f"{err}; not injected or stopped") from None

    def _check_aim(self, experiment: str, value: str) -> None:
        """The started experiment's copy of the target is this fault's tag (not a concurrent update's)."""
        targets = self.fis.get_experiment(id=experiment)["experiment"].get("targets") or {}
        got = {v for t in targets.values() for v in (t.get("resourceTags") or {}).values()}
        if got != {value}:
            self.fis.stop_experiment(id=experiment)
            self.running.remove(experiment)
            raise FaultError(f"FIS experiment {experiment} started on tag {', '.join(sorted(got)) or 'none'}, not this "
                             f"fault's {value} (another update of the template in between): stopped")

    def _hit(self, experiment: str, ours: set[str], kind: str) -> list[str]:
        """What FIS resolved its target to; ``FaultError`` unless every one is ours."""
        got = self.fis.list_experiment_resolved_targets(experimentId=experiment).get("resolvedTargets", [])
        hit, foreign = [], []
        for target in got:  # a target is ours when one of its values names our pod or instance (a name, an ARN)
            values = [str(v) for v in (target.get("targetInformation") or {}).values()]
            mine = [o for o in ours if any(v == o or v.endswith("/" + o) for v in values)]
            (hit if mine else foreign).append(mine[0] if mine else " ".join(values))  # our own name, not FIS' form
        if foreign or not hit:
            raise FaultError(f"{kind}: FIS experiment {experiment} hit {', '.join(foreign) or 'nothing'}, not this "
                             f"attempt's {', '.join(sorted(ours))}")
        return sorted(hit)

    def _wait(self, experiment: str, wait_s: float) -> dict:
        deadline = CLOCK.monotonic() + wait_s
        while True:
            got = self.fis.get_experiment(id=experiment)["experiment"]
            if got["state"].get("status") in DONE:
                return got
            if self.lease is not None:  # held until FIS resolved its target and acted
                self._renew()
            if CLOCK.monotonic() > deadline:
                raise Overdue(f"FIS experiment {experiment} still {got['state'].get('status')} after {wait_s:.0f} s "
                              f"(the experiment's step deadline, bench.deadlines)")
            CLOCK.sleep(self.poll_s)

    def _untag(self) -> None:
        if self.tagged:
            self.ec2.delete_tags(Resources=list(self.tagged), Tags=[{"Key": FAULT_TAG}])
            self.tagged.clear()

    def _unmark(self, stopped: list[str]) -> list[str]:
        """Remove the label, then free the Lease; left to expire when an experiment was just stopped (FIS'
        stop is not seen finished, and its target must not be another attempt's pod labelled meanwhile)."""
        done = []
        if self.labelled is not None:
            api, ns, name = self.labelled
            with _kube(f"remove {FAULT_TARGET_LABEL} from pod {ns}/{name}"):
                try:
                    api.core.patch_namespaced_pod(name, ns, {"metadata": {"labels": {FAULT_TARGET_LABEL: None}}})
                    done.append(f"removed {FAULT_TARGET_LABEL} from pod {name}")
                except ApiException as err:
                    if err.status != 404:
                        raise
                    done.append(f"pod {name} gone, its label {FAULT_TARGET_LABEL} with it")
            self.labelled = None
        if self.lease is not None:
            lease = self.lease
            if stopped and lease.version:
                done.append(f"Lease {lease.namespace}/{lease.name} left to expire within {lease.duration_s} s (FIS "
                            f"experiment {', '.join(stopped)} stopped)")
            else:
                with _kube(f"release Lease {lease.namespace}/{lease.name}"):
                    done.append(lease.release())
            self.lease = None
        return done

    def undo(self) -> list[str]:
        """Stop experiments still running, remove the instance tag and the pod label, release the Lease;
        what was undone (with what a failed ``inject`` undid)."""
        done, self.undone = list(self.undone), []
        stopped = []
        for exp in list(self.running):
            self.fis.stop_experiment(id=exp)
            self.running.remove(exp)
            stopped.append(exp)
            done.append(f"stopped FIS experiment {exp}")
        if self.tagged:
            done.append(f"untagged {', '.join(self.tagged)}")
            self._untag()
        return done + self._unmark(stopped)


def _iso(value) -> str | None:
    """A time FIS gave (boto3: a datetime; a fake: a string) as ISO 8601."""
    return None if value is None else value if isinstance(value, str) else value.isoformat()
