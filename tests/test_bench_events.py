"""``bench.collect.Seen`` keeps the Events of the attempt's own objects (its RayJob, Ray cluster, PodGroup and
pods), never those of an earlier attempt of the run or of another run whose name shares a prefix: a Killing
Event of attempt 1 read into attempt 2 would time attempt 2's detection from attempt 1's fault."""

from datetime import datetime, timezone
from types import SimpleNamespace

from bench_fakes import _plain, _pod

from bench.collect import Seen
from workloads.render.runs import RUN_LABEL

AT = datetime(2026, 12, 6, tzinfo=timezone.utc)


def _job(run: str, attempt: int) -> dict:
    name = f"{run}-{attempt}"
    return {"metadata": {"name": name, "labels": {RUN_LABEL: run}}, "status": {"rayClusterName": f"{name}-abcde"}}


def _event(name: str, kind: str, about: str):
    return SimpleNamespace(metadata=SimpleNamespace(name=name), involved_object=SimpleNamespace(kind=kind, name=about),
                           reason="Killing", event_time=AT)


class _Api:
    def __init__(self, pods, events):
        self.core = SimpleNamespace(
            api_client=SimpleNamespace(sanitize_for_serialization=_plain),
            list_namespaced_pod=lambda ns, label_selector="": SimpleNamespace(items=[
                p for p in pods if p.metadata.labels[RUN_LABEL] == label_selector.split("=", 1)[1]]),
            list_namespaced_event=lambda ns: SimpleNamespace(items=events),
            read_node=lambda name: {"metadata": {"name": name}})


def test_an_attempt_keeps_only_the_events_of_its_own_objects():
    pods = [_pod("x-1-abcde-head-aaaaa", "x", "headgroup", "sys-0", AT, 1),
            _pod("x-2-abcde-head-bbbbb", "x", "headgroup", "sys-1", AT, 2),
            _pod("x-2-abcde-rollout-worker-ccccc", "x", "rollout", "rollout-3", AT, 2),
            _pod("x-2-1-abcde-head-ddddd", "x-2", "headgroup", "sys-2", AT, 1)]
    events = [_event("e1", "Pod", "x-1-abcde-head-aaaaa"),           # attempt 1's pod
              _event("e2", "Pod", "x-2-abcde-rollout-worker-ccccc"),  # ours
              _event("e3", "RayCluster", "x-2-abcde"),               # ours
              _event("e4", "PodGroup", "ray-x-2-pg"),                # ours
              _event("e5", "RayJob", "x-2"),                         # ours
              _event("e6", "Pod", "x-2-1-abcde-head-ddddd"),          # run x-2's, attempt 1
              _event("e7", "RayJob", "x-2-1")]                       # run x-2's RayJob
    seen = Seen(log_source=None)
    seen.readers["x-2"] = SimpleNamespace(read=lambda api: "")
    seen.look(_Api(pods, events), "alpha", "x", [_job("x", 2)])
    assert sorted(seen.events) == ["e2", "e3", "e4", "e5"]
    assert sorted(seen.nodes) == ["rollout-3", "sys-1"]
