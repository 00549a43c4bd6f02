"""The run command's Kubernetes calls, through the official client (``kubernetes``).

A run lives in its team's namespace as one RayJob ``<run>-<attempt>`` per attempt, labelled
``rl.platform/run`` and ``rl.platform/team``; KubeRay makes its Ray cluster and Volcano PodGroup and,
in HTTPMode, posts the job to the run's head itself. Attempts are kept after they end or are
cancelled (suspended), so the next one is numbered after them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import json
import time

import yaml
from kubernetes import client as k8s

from stackconfig.stack import POOL_LABEL

from workloads.pod.miles_launcher import ARGV_ENV
from workloads.render.common import RAY_NODE_TYPE_LABEL
from workloads.render.runs import ATTEMPT_LABEL, RUN_LABEL, SAVE_STATE, podgroup_name
from workloads.render.teams import namespace_of
from workloads.schema.run import RunFile
from workloads.schema.teams import TEAM_LABEL
from workloads.derive.topology import tier_sizes_from_hypernodes

RAYJOB = ("ray.io", "v1", "rayjobs")
PODGROUP = ("scheduling.volcano.sh", "v1beta1", "podgroups")
HYPERNODE = ("topology.volcano.sh", "v1alpha1", "hypernodes")
HEAD_CONTAINER = "ray-head"
FINISHED = {"Complete", "Failed", "ValidationFailed", "Suspended"}
"""KubeRay v1.7.0 JobDeploymentStatus values after which a RayJob does no more (rayjob_types.go); a
Suspended one has had its cluster deleted and its PodGroup emptied (rayjob_controller.go:366-410)."""
DASHBOARD = "http://127.0.0.1:8265"
"""The head's own Jobs API, from inside the head container (which has the cluster's RAY_AUTH_TOKEN)."""
EXEC_TIMEOUT_S = 120


@dataclass(frozen=True)
class RunStatus:
    team: str
    run: str
    rayjob: str
    attempt: int
    job_status: str
    deployment_status: str
    message: str


def _flag(rayjob: dict, flag: str) -> str | None:
    """The value of one Miles flag of the run, from the argv in its runtime environment."""
    env = (yaml.safe_load(rayjob.get("spec", {}).get("runtimeEnvYAML") or "") or {}).get("env_vars", {})
    argv = json.loads(env.get(ARGV_ENV, "[]"))
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


def _word(rayjob: dict, option: str) -> str | None:
    """The value of one option of the launcher in the run's entrypoint."""
    words = rayjob.get("spec", {}).get("entrypoint", "").split()
    return words[words.index(option) + 1] if option in words[:-1] else None


def _attempt(rayjob: dict) -> int:
    name, run = rayjob["metadata"]["name"], rayjob["metadata"]["labels"][RUN_LABEL]
    suffix = name.removeprefix(f"{run}-")
    return int(suffix) if suffix.isdigit() else 0


def _status(rayjob: dict) -> RunStatus:
    md, st = rayjob["metadata"], rayjob.get("status") or {}
    return RunStatus(team=md["labels"][TEAM_LABEL], run=md["labels"][RUN_LABEL], rayjob=md["name"],
                     attempt=_attempt(rayjob), job_status=st.get("jobStatus", ""),
                     deployment_status=st.get("jobDeploymentStatus", ""), message=st.get("message", ""))


class RunClient:
    """Submit, list, show, follow and cancel runs; ``api`` is a configured ``kubernetes.client.ApiClient``."""

    def __init__(self, api: k8s.ApiClient):
        self.custom = k8s.CustomObjectsApi(api)
        self.core = k8s.CoreV1Api(api)
        self.coordination = k8s.CoordinationV1Api(api)
        """Leases: ``bench.lease``, one pod fault of a group at a time in a team."""
        self.authorization = k8s.AuthorizationV1Api(api)
        """SelfSubjectAccessReviews: ``bench.faults`` asks before the first attempt."""

    # --- reads ---------------------------------------------------------------------------------

    def rayjobs(self, team: str | None = None, run: str | None = None) -> list[dict]:
        """The runs' RayJobs, of one team or all, of one run or all, oldest attempt first."""
        selector = f"{RUN_LABEL}={run}" if run else RUN_LABEL
        if team:
            items = self.custom.list_namespaced_custom_object(*RAYJOB[:2], namespace_of(team), RAYJOB[2],
                                                              label_selector=selector)["items"]
        else:
            try:
                items = self.custom.list_cluster_custom_object(*RAYJOB, label_selector=selector)["items"]
            except k8s.ApiException as err:
                if err.status != 403:
                    raise
                raise LookupError("listing every team's runs needs a cluster-wide read of rayjobs (an administrator); "
                                  "a team member passes --team") from None
        return sorted(items, key=lambda j: (j["metadata"]["namespace"], j["metadata"]["labels"][RUN_LABEL],
                                            _attempt(j)))

    def list(self, team: str | None = None) -> list[RunStatus]:
        return [_status(j) for j in self.rayjobs(team)]

    def next_attempt(self, run: RunFile) -> int:
        """One more than the highest attempt of ``run`` in its team's namespace (1 when none)."""
        return max((_attempt(j) for j in self.rayjobs(run.team, run.name)), default=0) + 1

    def show(self, team: str, run: str) -> dict:
        """The run's attempts, its PodGroup phase and its pods' phases."""
        jobs = self.rayjobs(team, run)
        if not jobs:
            raise LookupError(f"no run {run!r} in namespace {namespace_of(team)}")
        latest = jobs[-1]["metadata"]["name"]
        try:
            pg = self.custom.get_namespaced_custom_object(*PODGROUP[:2], namespace_of(team), PODGROUP[2],
                                                          podgroup_name(latest))
            podgroup = (pg.get("status") or {}).get("phase", "")
        except k8s.ApiException as err:
            if err.status != 404:
                raise
            podgroup = "(none yet)"
        pods = self.core.list_namespaced_pod(namespace_of(team), label_selector=f"{RUN_LABEL}={run}").items
        return {"attempts": [_status(j) for j in jobs], "podGroup": podgroup,
                "pods": {p.metadata.name: p.status.phase for p in pods}}

    def tier_sizes(self, needs: dict[str, int]) -> dict[int, int]:
        """Per tier, the most nodes of a gang taking ``needs[pool]`` nodes of each pool one HyperNode holds
        (``topology.tier_sizes_from_hypernodes``)."""
        hypernodes = self.custom.list_cluster_custom_object(*HYPERNODE)["items"]
        pools = [({n.metadata.name for n in self.core.list_node(label_selector=f"{POOL_LABEL}={pool}").items}, need)
                 for pool, need in needs.items() if need]
        return tier_sizes_from_hypernodes(hypernodes, pools)

    def run_tier_sizes(self, run: RunFile, train: str, rollout: str) -> tuple[dict[int, int], dict[int, int]]:
        """(the run's gang, its trainers): per tier, the most of their nodes one HyperNode holds."""
        gang = {pool: run.nodes.get(pool, 0) for pool in (train, rollout)}
        return self.tier_sizes(gang), self.tier_sizes({train: gang[train]})

    # --- writes --------------------------------------------------------------------------------

    def submit(self, rayjob: dict) -> dict:
        """Create the RayJob (its disruption budget is the team's, ``render.runs.team_run_budget``)."""
        md = rayjob["metadata"]
        return self.custom.create_namespaced_custom_object(*RAYJOB[:2], md["namespace"], RAYJOB[2], rayjob)

    def checkpoint(self, team: str, run: str, timeout_s: int, poll_s: float = 10.0) -> bool:
        """Ask the run's latest attempt for a checkpoint and wait for it: create Miles' save sentinel
        from that attempt's head pod (which mounts the team's directory) and wait until Miles removes
        it, having saved. False, and nothing left waiting, when the attempt's job is not running, its
        driver's lease lapses, the save takes longer than ``timeout_s``, or the pod cannot be reached."""
        jobs = self.rayjobs(team, run)
        if not jobs or (jobs[-1].get("status") or {}).get("jobStatus") != "RUNNING":
            return False
        job = jobs[-1]
        sentinel, lease, attempt = _flag(job, "--save-trigger-sentinel"), _word(job, "--marker"), _attempt(job)
        head = self._head(team, run, job)
        if sentinel is None or lease is None or head is None:
            return False
        state = ["sh", "-c", SAVE_STATE, "save-state", lease, sentinel, str(attempt)]
        try:
            if self._exec(team, head, ["touch", sentinel])[0] != 0:
                return False  # nothing was asked for
            deadline = time.monotonic() + timeout_s
            while (answer := self._answer(team, head, state)) == "waiting" and time.monotonic() < deadline:
                time.sleep(poll_s)
            if answer != "saved":
                self._exec(team, head, ["rm", "-f", sentinel])  # no request left for a later attempt
        except k8s.ApiException:
            return False
        return answer == "saved"

    def _answer(self, team: str, pod: str, command: list[str]) -> str:
        """The stripped output of ``command``, or "failed" when it does not exit 0."""
        code, out = self._exec(team, pod, command)
        return out.strip() if code == 0 else "failed"

    def unfinished(self, team: str, run: str) -> list[str]:
        """The run's attempts that have not finished, or whose Ray pods still exist (stopping). Only Ray
        pods count: a K8sJobMode submitter's pods outlive the cluster (rayjob_controller.go:1543-1549, v1.7.0)."""
        busy = [j["metadata"]["name"] for j in self.rayjobs(team, run)
                if (j.get("status") or {}).get("jobDeploymentStatus") not in FINISHED]
        pods = self.core.list_namespaced_pod(namespace_of(team),
                                             label_selector=f"{RUN_LABEL}={run},{RAY_NODE_TYPE_LABEL}").items
        return busy + ([f"{len(pods)} pods still stopping"] if pods and not busy else [])

    def _exec(self, team: str, pod: str, command: list[str]) -> tuple[int | None, str]:
        """Run ``command`` in the pod's Ray container (the exec subresource): its exit status, read from
        the exec stream's status channel (None when it did not end within ``EXEC_TIMEOUT_S``), and its stdout."""
        from kubernetes.stream import stream  # noqa: PLC0415  (websocket client, only for exec)
        ws = stream(self.core.connect_get_namespaced_pod_exec, pod, namespace_of(team), container=HEAD_CONTAINER,
                    command=command, stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
        try:
            ws.run_forever(timeout=EXEC_TIMEOUT_S)
            try:
                code = ws.returncode
            except (KeyError, IndexError, TypeError, ValueError):  # a Failure status without an exit code
                code = None
            return code, ws.read_stdout(timeout=0) if ws.peek_stdout(timeout=0) else ""
        finally:
            ws.close()

    def cancel(self, team: str, run: str, now: bool = False) -> list[str]:
        """Suspend the run's unfinished attempts: KubeRay deletes their Ray clusters and empties their
        PodGroups (rayjob_controller.go:366-410, 1043-1060); the RayJobs stay, so ``submit --resume``
        numbers the next attempt after them. ``now`` also deletes the run's pods at once. Ask for a
        checkpoint first (``checkpoint``): once the job is stopped its lease lapses, and the pods'
        preStop hooks no longer ask for one."""
        names = [j["metadata"]["name"] for j in self.rayjobs(team, run)
                 if (j.get("status") or {}).get("jobDeploymentStatus") not in FINISHED]
        for name in names:
            self.custom.patch_namespaced_custom_object(*RAYJOB[:2], namespace_of(team), RAYJOB[2], name,
                                                       {"spec": {"suspend": True}})
        if now:
            self.core.delete_collection_namespaced_pod(namespace_of(team), label_selector=f"{RUN_LABEL}={run}",
                                                       grace_period_seconds=0)
        return names

    def _head(self, team: str, run: str, job: dict) -> str | None:
        """The running head pod of the attempt ``job`` of ``run``, if it has one."""
        heads = self.core.list_namespaced_pod(namespace_of(team), label_selector=(
            f"{RUN_LABEL}={run},{ATTEMPT_LABEL}={_attempt(job)},{RAY_NODE_TYPE_LABEL}=head")).items
        return next((p.metadata.name for p in heads if p.status.phase == "Running"), None)

    def follow(self, team: str, run: str) -> Iterator[str]:
        """The driver's log, from the latest attempt's head: ``ray job logs --follow`` against its own Jobs
        API (HTTPMode has no submitter pod to read)."""
        jobs = self.rayjobs(team, run)
        if not jobs:
            raise LookupError(f"no run {run!r} in namespace {namespace_of(team)}")
        latest = jobs[-1]
        job_id = (latest.get("status") or {}).get("jobId")
        head = self._head(team, run, latest)
        if not job_id or head is None:
            raise LookupError(f"run {run!r}: {latest['metadata']['name']} has no running head yet (the gang may be "
                              f"waiting: see `show`)")
        from kubernetes.stream import stream  # noqa: PLC0415
        ws = stream(self.core.connect_get_namespaced_pod_exec, head, namespace_of(team),
                    container=HEAD_CONTAINER, command=["ray", "job", "logs", "--follow", "--address", DASHBOARD, job_id],
                    stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
        try:
            while ws.is_open():
                ws.update(timeout=1)
                if ws.peek_stdout():
                    yield ws.read_stdout()
        finally:
            ws.close()


def attempt_of(run: RunFile, attempt: int) -> RunFile:
    """``run`` at another attempt (a new RayJob name; Miles resumes from the same checkpoint directory)."""
    return run.model_copy(update={"attempt": attempt})

