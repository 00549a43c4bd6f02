"""AWS for the bench run tests, over the fake cluster of ``bench_fakes``: FIS running the stack's templates
(``components.faults``), EC2's tags and the checkpoint bucket's driver logs (S3)."""

import threading
from types import SimpleNamespace

from bench_fakes import CLUSTER, NAMESPACE, FakeRuns, _now
from components.faults import template_specs


class Refused(Exception):
    """botocore's ClientError as far as the bench reads it: ``response["Error"]["Code"]``."""

    def __init__(self, code: str):
        super().__init__(code)
        self.response = {"Error": {"Code": code}}


class FakeFIS:
    """AWS FIS over the fake cluster: the stack's templates (components.faults, as specified) run as
    their parameters say: a pod-delete with its grace period on one pod its selector matches, a
    terminate on the instances tagged with the template's value; a target preview (actionsMode
    skip-all) acts on nothing; ``denied`` templates answer AccessDeniedException to StartExperiment;
    ``also_resolved`` targets are reported beside the ones hit (what a race FIS won would show), and
    ``started_on`` replaces the tag value the started experiment records (a concurrent template update).
    With ``resolve_late`` a pod-delete resolves its target at a GetExperiment after its start (FIS acts after
    StartExperiment returns): the first at which ``resolve_now()`` holds; no pod to resolve: failed."""

    def __init__(self, cluster: FakeRuns, ec2: "FakeEC2", fail_with: str | None = None):
        self.cluster, self.ec2, self.fail_with = cluster, ec2, fail_with
        self.specs = {f"EXT-{key}": spec for key, spec in template_specs(CLUSTER, [("alpha", NAMESPACE)]).items()}
        self.started, self.stopped, self.experiments, self.previews = [], [], {}, []
        self.denied: set[str] = set()
        self.killed: list[str] = []
        self.updated: list[tuple[str, dict]] = []
        self.also_resolved: list[dict] = []
        self.started_on: str | None = None
        self.resolve_late = False
        self.resolve_now = lambda: True
        self.qualified = False
        """Report a pod target as ``<namespace>/<pod>`` (a form FIS' targetInformation may take) instead of its name."""
        self.newest = False
        """Resolve a pod-delete to the newest pod its selector matches (FIS picks any one of them, COUNT(1))."""
        self.lock = threading.RLock()

    def list_experiment_templates(self, **_):
        return {"experimentTemplates": [{"id": i, "tags": tags} for i, (_, tags) in self.specs.items()]}

    def update_experiment_template(self, id, targets):
        self.updated.append((id, targets))
        spec, _ = self.specs[id]
        for t in spec["targets"]:
            if t["name"] in targets:
                t["resource_tags"] = [{"key": k, "value": v} for k, v in targets[t["name"]]["resourceTags"].items()]

    def start_experiment(self, experimentTemplateId, tags, experimentOptions=None):
        with self.lock:  # one experiment id each, when two benches start at once
            return self._start(experimentTemplateId, experimentOptions)

    def _start(self, experimentTemplateId, experimentOptions):
        if experimentTemplateId in self.denied:
            raise Refused("AccessDeniedException")
        spec, _ = self.specs[experimentTemplateId]
        exp = f"EXP{len(self.started) + len(self.previews)}"
        if (experimentOptions or {}).get("actionsMode") == "skip-all":
            self.previews.append(experimentTemplateId)
            return {"experiment": {"id": exp}}
        self.started.append(experimentTemplateId)
        action, target = spec["actions"][0], spec["targets"][0]
        now = _now()
        if action["action_id"] == "aws:eks:pod-delete":
            self.experiments[exp] = {"state": {"status": "running"}, "actions": {}, "targets": {}, "resolved": [],
                                     "pending": (action, target)}
            if not self.resolve_late:
                self._delete_pod(exp)
            return {"experiment": {"id": exp}}
        else:
            tag = target["resource_tags"][0]
            ids = [i for i, t in self.ec2.tags.items() if t.get(tag["key"]) == tag["value"]]
            hit = [{"resourceType": "aws:ec2:instance", "targetName": "node",
                    "targetInformation": {"arn": f"arn:aws:ec2:us-east-1:123456789012:instance/{i}"}} for i in ids]
            for iid in ids:
                self.cluster.terminate(iid.removeprefix("i-"))
        state = {"status": "failed", "reason": self.fail_with} if self.fail_with else {"status": "completed"}
        self.experiments[exp] = {"state": state, "actions": {action["name"]: {"startTime": now}},
                                 "targets": {t["name"]: {"resourceTags": {x["key"]: self.started_on or x["value"]
                                                                          for x in t.get("resource_tags", [])}}
                                             for t in spec["targets"]}, "resolved": hit + self.also_resolved}
        return {"experiment": {"id": exp}}

    def _delete_pod(self, exp: str) -> None:
        """FIS resolves the pod-delete's target now (one pod its selector matches) and deletes it."""
        with self.lock:
            action, target = self.experiments[exp].pop("pending")
            want = dict(kv.split("=") for kv in target["parameters"]["selectorValue"].split(","))
            pods = [p for p in self.cluster.pods if all(p.metadata.labels.get(k) == v for k, v in want.items())]
            pod = (pods[-1] if self.newest else pods[0]) if pods else None
            if pod is None:
                self.experiments[exp]["state"] = {"status": "failed", "reason": "Target resolution returned no pod"}
                return
            grace = int({p["key"]: p["value"] for p in action["parameters"]}["gracePeriodSeconds"])
            self.killed.append(pod.metadata.name)
            self.cluster.kill(pod, grace)
            state = {"status": "failed", "reason": self.fail_with} if self.fail_with else {"status": "completed"}
            self.experiments[exp] |= {"state": state, "actions": {action["name"]: {"startTime": _now()}}, "resolved": [
                {"resourceType": "aws:eks:pod", "targetName": "pod",
                 "targetInformation": {"namespace": NAMESPACE, "podName": f"{NAMESPACE}/{pod.metadata.name}"
                                       if self.qualified else pod.metadata.name}}, *self.also_resolved]}

    def get_experiment(self, id):
        if "pending" in self.experiments[id] and self.resolve_now():
            self._delete_pod(id)
        got = self.experiments[id]
        return {"experiment": {"id": id, "state": got["state"], "actions": got["actions"], "targets": got["targets"]}}

    def list_experiment_resolved_targets(self, experimentId):
        return {"resolvedTargets": self.experiments[experimentId]["resolved"]}

    def stop_experiment(self, id):
        self.stopped.append(id)


class FakeEC2:
    def __init__(self):
        self.tags: dict[str, dict] = {}
        self.may_tag = True

    def create_tags(self, Resources, Tags, DryRun=False):
        if DryRun:
            raise Refused("DryRunOperation" if self.may_tag else "UnauthorizedOperation")
        for r in Resources:
            self.tags.setdefault(r, {}).update({t["Key"]: t["Value"] for t in Tags})

    def delete_tags(self, Resources, Tags):
        for r in Resources:
            for t in Tags:
                self.tags.get(r, {}).pop(t["Key"], None)


class FakeS3:
    """The checkpoint bucket: the launcher's log files as the file system exported them."""

    def __init__(self, cluster: FakeRuns):
        self.cluster, self.reads = cluster, []

    def get_object(self, Bucket, Key, Range):
        self.reads.append((Key, Range))
        run, log = Key.split("/")[-2:]
        text = ("\n".join(self.cluster.logs[f"{run}-{log.removeprefix('driver-').removesuffix('.log')}"]) + "\n").encode()
        start = int(Range.removeprefix("bytes=").rstrip("-"))
        if start >= len(text):
            raise type("ClientError", (Exception,), {"response": {"Error": {"Code": "InvalidRange"}}})()
        return {"Body": SimpleNamespace(read=lambda: text[start:])}


def _aws(fake: FakeRuns, fail_with: str | None = None):
    ec2 = FakeEC2()
    fis = FakeFIS(fake, ec2, fail_with)
    clients = {"fis": fis, "ec2": ec2, "s3": FakeS3(fake)}
    return clients, lambda service, region: clients[service]
