"""Pod faults aimed at exactly one pod of this attempt (issue 37 item 6): no template renders the fault label;
the bench holds the group's Lease in the team namespace (``bench.lease``) from labelling one pod to FIS'
resolution of the target, and removes the label and frees the Lease on every way out (``bench.faults``). The
fake cluster keeps Leases as the API server does (``fake_leases``: the rendered ones from the start, no
member create, updates at a resourceVersion)."""

from __future__ import annotations

import json
import threading
import time

import pytest
import yaml

import bench_fakes
from bench.__main__ import main
from bench.deadlines import Overdue
from bench.lease import LeaseLost, TeamLease
from bench_fakes import FakeClock, FakeRuns
from bench_fakes_aws import _aws
from components.faults import FAULT_LEASE_SECONDS, FAULT_TARGET_LABEL, fault_lease
from fake_leases import FakeLeases
from test_bench_run import _experiment, _run

REAL_SLEEP = time.sleep


class ThreadClock(FakeClock):
    """The fake clock, shared by two benches in two threads: sleeping advances it and waits ``real`` of that for
    real (1/250 there, so that one bench's wait of a Lease's duration, 60 s: 240 ms, outlasts the other's poll,
    5 s: 20 ms, and the few calls after it, as on a real clock)."""

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()
        self.real = 0.0

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.t += seconds
        if self.real:
            REAL_SLEEP(seconds * self.real)


@pytest.fixture(autouse=True)
def clock(monkeypatch) -> ThreadClock:
    fake = bench_fakes.use_clock(monkeypatch, ThreadClock())
    return fake


def _labelled(fake: FakeRuns) -> list[str]:
    return [p.metadata.name for p in fake.pods if FAULT_TARGET_LABEL in p.metadata.labels]


def _pair(tmp_path, name: str):
    folder = tmp_path / name
    folder.mkdir()
    return _experiment(folder, [{"kind": "delete-rollout-pod", "atStep": 12}], name=name), folder / "o"


def test_two_concurrent_attempts_of_one_team_serialise_and_neither_kills_the_others_pod(tmp_path, clock):
    """Two benches of team alpha inject a rollout pod fault at the same time, each FIS experiment resolving its
    target after StartExperiment returned. Before: every fault arm's pods carried the label from submission, so
    the first to inject found the other's labelled pods and refused (or, one moment earlier, FIS could pick
    them). Now the second waits for the Lease until the first removed its label, and each kills its own pod."""
    clock.real = 1 / 250
    fake = FakeRuns(save_interval=10, total=80)  # neither job ends while the other reaches its fault
    clients, aws = _aws(fake)
    fis = clients["fis"]
    fis.resolve_late = True
    fis.resolve_now = fake.coordination.contended.is_set  # only once the other bench waits at the Lease
    runs = {name: _pair(tmp_path, name) for name in ("pair-a", "pair-b")}
    codes: dict[str, tuple[int, str]] = {}

    def bench(name: str) -> None:
        path, out = runs[name]
        codes[name] = _run(path, fake, aws, out, "--only", "node/r1")

    threads = [threading.Thread(target=bench, args=(n,)) for n in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert codes == {n: (0, codes[n][1]) for n in runs}, codes
    hits = {n: json.loads((out / "node" / "r1" / "faults.json").read_text())[0]["hit"] for n, (_, out) in runs.items()}
    assert hits == {n: [f"{n}-node-r1-1-rollout-0"] for n in runs}
    assert sorted(fis.killed) == sorted(h[0] for h in hits.values())  # nothing else deleted
    holders = [h for h, lease in fake.coordination.writes if lease == fault_lease("rollout")]
    first, second = holders[0], next(h for h in holders if h not in (None, holders[0]))
    # serialised: the second holder's first write comes after the first holder's release, and not before
    assert holders.index(second) > holders.index(None) and holders[-1] is None
    assert first not in holders[holders.index(second):]
    assert any(holder == first for _, holder in fake.coordination.reads_while_held)  # the second waited
    assert _labelled(fake) == []


def test_a_teammates_fault_arm_submitted_while_fis_resolves_is_not_hit(tmp_path, capsys):
    """Review 37 B2: a teammate's fault-arm attempt starts between this fault's checks and FIS' resolution of
    its target, and FIS picks the teammate's new pod. Before, its pods carried the label from their RayJob's
    template and the teammate's run lost a pod (this attempt INCOMPLETE); now only the pod this bench labelled
    matches."""
    fake = FakeRuns(save_interval=10, total=33)
    clients, aws = _aws(fake)
    mate, _ = _pair(tmp_path, "mate")
    assert main(["run", str(mate), "--dry-run"]) == 0
    theirs = next(j for j in yaml.safe_load_all(capsys.readouterr().out) if j["metadata"]["name"].startswith("mate-node"))
    fis = clients["fis"]
    fis.resolve_late, fis.newest = True, True
    fis.resolve_now = lambda: fake.submit(theirs) is not None  # submitted just before FIS resolves
    code, _ = _run(_experiment(tmp_path, [{"kind": "delete-rollout-pod", "atStep": 12}]), fake, aws, tmp_path / "o",
                   "--only", "node/r1")
    assert not any(p.startswith("mate-") for p in fis.killed), fis.killed
    assert code == 0 and fis.killed == ["example-ab-node-r1-1-rollout-0"]


def test_the_label_is_rendered_on_no_pod_and_put_on_one_pod_only_while_the_lease_is_held(tmp_path, capsys):
    """Each kill finds one labelled pod, the one killed, while its attempt holds the Lease."""
    fake = FakeRuns(save_interval=10, total=33)
    clients, aws = _aws(fake)
    seen: list[tuple[list[str], str, str | None]] = []
    kill = fake.kill

    def watched(pod, grace):
        lease = fake.coordination.leases[("team-alpha", fault_lease("rollout"))]
        seen.append((_labelled(fake), pod.metadata.name, lease.spec.holder_identity))
        kill(pod, grace)
    fake.kill = watched
    code, _ = _run(_experiment(tmp_path, [{"kind": "delete-rollout-pod", "atStep": 12}]), fake, aws, tmp_path / "o")
    assert code == 0, capsys.readouterr().err
    groups = [g for j in fake.submitted for g in j["spec"]["rayClusterSpec"]["workerGroupSpecs"]]
    assert not any(FAULT_TARGET_LABEL in (g["template"].get("metadata") or {}).get("labels", {}) for g in groups)
    assert len(seen) == 3 and all(labelled == [pod] and pod == f"{holder}-rollout-0" for labelled, pod, holder in seen)
    assert _labelled(fake) == [] and fake.coordination.writes[-1][0] is None


def test_dry_run_prints_no_fault_label(capsys):
    assert main(["run", "experiments/example-ab.yaml", "--dry-run"]) == 0
    assert FAULT_TARGET_LABEL not in capsys.readouterr().out


@pytest.mark.parametrize("how", ["fis failed", "fis overdue"])
def test_the_label_is_removed_on_every_way_out(tmp_path, capsys, how):
    """FIS ends failed: the label is removed and the Lease freed. FIS never finishes: the experiment is stopped,
    the label removed, and the Lease left to expire (the stop is not seen finished)."""
    fake = FakeRuns(save_interval=10, total=33)
    clients, aws = _aws(fake, fail_with="boom" if how == "fis failed" else None)
    if how == "fis overdue":
        clients["fis"].resolve_late = True
        clients["fis"].get_experiment = lambda id: {"experiment": {"id": id, "state": {"status": "running"}}}
    code, text = _run(_experiment(tmp_path, [{"kind": "delete-rollout-pod", "atStep": 12}]), fake, aws,
                      tmp_path / "o", "--only", "node/r1")
    assert code == 1 and _labelled(fake) == []
    lease = fake.coordination.leases[("team-alpha", fault_lease("rollout"))]
    if how == "fis failed":
        assert lease.spec.holder_identity is None
    else:
        assert clients["fis"].stopped and lease.spec.holder_identity == "example-ab-node-r1-1"
        assert f"left to expire within {FAULT_LEASE_SECONDS} s" in text


@pytest.mark.parametrize("lacks", [("update", "leases"), ("patch", "pods")])
def test_a_member_without_the_fault_role_is_refused_before_anything_runs(tmp_path, capsys, lacks):
    """A stack deployed without the member's fault Role: the Lease or the label would be refused (403) at the
    fault's step, hours in; RBAC is asked first (SelfSubjectAccessReview)."""
    fake = FakeRuns(save_interval=10, total=33)
    clients, aws = _aws(fake)
    fake.denied.add(lacks)
    code, _ = _run(_experiment(tmp_path, [{"kind": "delete-rollout-pod", "atStep": 12}]), fake, aws, tmp_path / "o")
    err = capsys.readouterr().err
    assert code == 1 and fake.submitted == [] and f"may not {lacks[0]} {lacks[1]}" in err and "bench-fault-target" in err


# --- the Lease ------------------------------------------------------------------------------------------

def _lease(api: FakeLeases, holder: str) -> TeamLease:
    return TeamLease(api, "team-alpha", fault_lease("rollout"), holder)


def test_of_two_holders_one_holds_until_it_frees_the_lease(clock):
    api = FakeLeases()
    a, b = _lease(api, "a"), _lease(api, "b")
    a.acquire(10, 1)
    with pytest.raises(Overdue, match="still held by a"):
        b.acquire(FAULT_LEASE_SECONDS / 2, 5)  # a renews nothing, but half its duration is not stale
    a.renew()
    assert a.release() == "released Lease team-alpha/rl-fault-target-rollout"
    b.acquire(10, 1)
    assert [h for h, _ in api.writes] == ["a", "a", None, "b"]


def test_a_lease_whose_holder_stopped_renewing_is_taken_over_after_its_duration_and_the_holder_knows(clock):
    api = FakeLeases()
    a, b = _lease(api, "a"), _lease(api, "b")
    a.acquire(10, 1)
    start = clock.monotonic()
    b.acquire(10 * FAULT_LEASE_SECONDS, 5)
    assert clock.monotonic() - start >= FAULT_LEASE_SECONDS  # seen unchanged for its duration, by b's clock
    with pytest.raises(LeaseLost, match="taken over from a"):
        a.renew()
    assert a.release() == "Lease team-alpha/rl-fault-target-rollout not held"
    assert api.leases[("team-alpha", "rl-fault-target-rollout")].spec.holder_identity == "b"


def test_two_takeovers_at_one_version_leave_one_holder():
    api = FakeLeases()
    _lease(api, "a").acquire(10, 1)
    version = api.leases[("team-alpha", "rl-fault-target-rollout")].metadata.resource_version
    b, c = _lease(api, "b"), _lease(api, "c")
    assert b._write(version, "b") is not None and c._write(version, "c") is None  # 409 for the second


def test_a_lease_renewed_while_another_waits_is_never_taken_over(clock, monkeypatch):
    """b waits three durations while a renews at each of b's polls: never stale (a renewTime of a's is not
    what b judges by, the version it sees change is)."""
    api = FakeLeases()
    a, b = _lease(api, "a"), _lease(api, "b")
    a.acquire(10, 1)
    sleep = clock.sleep
    monkeypatch.setattr("bench.deadlines.CLOCK.sleep", lambda s: (sleep(s), a.renew()))
    with pytest.raises(Overdue, match="still held by a"):
        b.acquire(3 * FAULT_LEASE_SECONDS, 5)
    assert api.leases[("team-alpha", "rl-fault-target-rollout")].spec.holder_identity == "a"


def test_a_lease_written_with_a_huge_duration_is_stale_after_the_platforms_duration(clock):
    """A teammate's Lease claiming leaseDurationSeconds 2147483647 is judged by the platform's own duration:
    otherwise every other bench of the team waited until its deadline (review35b F3)."""
    api = FakeLeases()
    version = api.leases[("team-alpha", "rl-fault-target-rollout")].metadata.resource_version
    api.replace_namespaced_lease("rl-fault-target-rollout", "team-alpha", {
        "metadata": {"name": "rl-fault-target-rollout", "namespace": "team-alpha", "resourceVersion": version},
        "spec": {"holderIdentity": "squatter", "leaseDurationSeconds": 2147483647}})
    start = clock.monotonic()
    _lease(api, "b").acquire(3 * FAULT_LEASE_SECONDS, 5)
    assert FAULT_LEASE_SECONDS <= clock.monotonic() - start < 2 * FAULT_LEASE_SECONDS
    assert api.leases[("team-alpha", "rl-fault-target-rollout")].spec.holder_identity == "b"


def test_the_lease_is_taken_by_update_only_and_keeps_its_rendered_labels(clock):
    """The stack renders the Lease (``render.faults.fault_leases``); the bench never creates one (a member's
    create is refused: review37c B1) and a missing one is ``LeaseMissing`` naming the stack's rendering."""
    from bench.lease import LeaseMissing
    api = FakeLeases()
    a = _lease(api, "a")
    a.acquire(10, 1)
    assert api.leases[("team-alpha", "rl-fault-target-rollout")].metadata.labels == {"rendered": "yes"}
    a.release()
    with pytest.raises(LeaseMissing, match="renders it with the team namespace"):
        TeamLease(api, "team-beta", fault_lease("rollout"), "a").acquire(10, 1)


@pytest.mark.parametrize("fails", ["no rendered lease", "lease update 403", "label patch 500"])
def test_a_kubernetes_api_error_in_a_pod_fault_ends_that_attempt_incomplete_and_the_experiment_goes_on(
        tmp_path, capsys, fails):
    """Any API error in the fault's Lease or label step was re-raised out of ``bench run``, stopping every
    attempt after it (review37c B1): it is a ``FaultError``, the attempt INCOMPLETE, the others run."""
    from kubernetes.client import ApiException
    fake = FakeRuns(save_interval=10, total=33)
    _, aws = _aws(fake)
    if fails == "no rendered lease":
        fake.coordination.leases.clear()
    elif fails == "lease update 403":
        fake.coordination.replace_namespaced_lease = lambda *a, **k: (_ for _ in ()).throw(
            ApiException(status=403, reason="Forbidden"))
    else:
        patch = fake.core.patch_namespaced_pod

        def refused(name, ns, body):
            if (body["metadata"]["labels"] or {}).get(FAULT_TARGET_LABEL):
                raise ApiException(status=500, reason="InternalError")
            return patch(name, ns, body)
        fake.core.patch_namespaced_pod = refused
    code, _ = _run(_experiment(tmp_path, [{"kind": "delete-rollout-pod", "atStep": 12}]), fake, aws, tmp_path / "o")
    assert code == 1
    incomplete = sorted(p.parent.relative_to(tmp_path / "o").as_posix() for p in (tmp_path / "o").rglob("INCOMPLETE"))
    assert incomplete == ["node/r1", "node/r2", "node/r3"]
    assert (tmp_path / "o" / "nccl" / "r3" / "rayjob.json").exists()  # the experiment went on to its end
    reason = (tmp_path / "o" / "node" / "r1" / "INCOMPLETE").read_text()
    want = {"no rendered lease": "Lease team-alpha/rl-fault-target-rollout does not exist",
            "lease update 403": "take Lease team-alpha/rl-fault-target-rollout: the Kubernetes API answered 403",
            "label patch 500": "label pod team-alpha/example-ab-node-r1-1-rollout-0 rl.platform/fault-target=rollout: "
                               "the Kubernetes API answered 500"}[fails]
    assert want in reason, reason
