"""What Volcano schedules a team's work by, judged on its RayJobs, Ray clusters and PodGroups: the
namespace's own queue, a platform run priority, and preemptable (``render.admission`` binds them)."""

from __future__ import annotations

from collections.abc import Iterable

from workloads.render.cel import cel_list
from workloads.render.runs import PRIORITY_LABEL, QUEUE_LABEL

PREEMPTABLE = "volcano.sh/preemptable"
"""Volcano reads it from a pod's annotations, else its labels, default true, and an unparsable value as
false (v1.15.1 pkg/scheduler/api/pod_info.go:125-150); preempt and reclaim skip a task that is not
preemptable (actions/preempt/preempt.go:207, actions/reclaim/reclaim.go:189); a PodGroup's the same way
(api/job_info.go:524-550). KubeRay copies a RayJob's annotations to its PodGroup (volcano_scheduler.go:218-219)."""


def preemptable(meta: str = "object.metadata") -> str:
    """``PREEMPTABLE`` is absent or 'true' in the annotations and the labels of ``meta``."""
    return " && ".join(f"(!has({meta}.{m}) || !('{PREEMPTABLE}' in {meta}.{m}) || {meta}.{m}['{PREEMPTABLE}'] == 'true')"
                       for m in ("annotations", "labels"))



def queue_rules(priority_classes: Iterable[str]) -> list[tuple[str, str]]:
    """The queue and priority labels KubeRay copies to the PodGroup (volcano_scheduler.go:253-258, v1.7.0)
    and to every pod (:263-265), on a RayJob and on the RayCluster made from it
    (rayjob_controller.go:997-1002)."""
    classes = cel_list(sorted(priority_classes))
    return [
        (f"has(object.metadata.labels) && '{QUEUE_LABEL}' in object.metadata.labels"
         f" && object.metadata.labels['{QUEUE_LABEL}'] == request.namespace",
         f"a team's RayJob is in its own team's queue (label {QUEUE_LABEL} = its namespace): KubeRay copies the "
         "label to the PodGroup unchecked (volcano_scheduler.go:253-258, v1.7.0)"),
        (f"has(object.metadata.labels) && '{PRIORITY_LABEL}' in object.metadata.labels"
         f" && object.metadata.labels['{PRIORITY_LABEL}'] in {classes}",
         f"a team's RayJob has one of the platform's run priorities {classes} (label {PRIORITY_LABEL})"),
        (preemptable(), f"a team's RayJob and Ray cluster stay preemptable ({PREEMPTABLE} absent or 'true'): "
                         "KubeRay copies their annotations to the PodGroup"),
    ]



def podgroup_rules(priority_classes: Iterable[str]) -> list[tuple[str, str]]:
    """A PodGroup (spec.queue, spec.priorityClassName: Volcano v1.15.1 config/crd/volcano/bases/
    scheduling.volcano.sh_podgroups.yaml) in the namespace's own queue at a platform priority: whoever
    makes it, KubeRay from the RayJob's labels or Volcano's controller from a pod's
    ``scheduling.volcano.sh/queue-name`` annotation (pkg/controllers/podgroup/pg_controller_handler.go:
    301-401)."""
    classes = cel_list(sorted(priority_classes))
    return [
        ("has(object.spec.queue) && object.spec.queue == request.namespace",
         "a team's PodGroup is in its own team's queue (spec.queue = its namespace)"),
        (f"has(object.spec.priorityClassName) && object.spec.priorityClassName in {classes}",
         f"a team's PodGroup has one of the platform's run priorities {classes} (spec.priorityClassName)"),
        (preemptable(), f"a team's PodGroup stays preemptable ({PREEMPTABLE} absent or 'true')"),
    ]
