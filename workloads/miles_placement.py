"""Run a Miles entry point with its training actors on the training group's nodes, by construction.

    python3 miles_placement.py /root/miles/train.py <Miles flags>

Miles 49cac7b5 (miles/ray/placement_group.py) asks Ray for one PACK placement group of
``{"GPU": 1, "CPU": 1}`` bundles, sorts the bundles by ``sort_key`` (node IP, then GPU id), and gives
the first ``--actor-num-nodes`` x ``--actor-num-gpus-per-node`` of that order to training, the rest to
the rollout engines. The training and rollout pools share one subnet (EFA OS-bypass traffic does not
cross subnets), so IP order mixes them: training actors could land on rollout nodes.

Both names are looked up in that module when the placement group is made, so this launcher replaces
them before the entry point runs:

- ``placement_group`` gets a per-bundle label selector (Ray >= 2.49 ``bundle_label_selector``):
  the first training-GPU bundles on ``ray.io/node-group: trainer``, the others on ``rollout``. Ray
  labels every node with ``ray.io/node-group`` from ``RAY_NODE_TYPE_NAME``
  (ray/_private/resource_and_label_spec.py, 2.53), which KubeRay sets to the pod's worker group
  (ray-operator/controllers/ray/common/pod.go:1266, v1.7.0);
- ``sort_key`` ranks the training bundles before the others, and keeps Miles' own order within each.

So Miles' "first N bundles" are exactly the bundles on training nodes. Anything else (another
bundle count: colocated, debug or external-rollout layouts) is passed through unchanged.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

NODE_GROUP_LABEL = "ray.io/node-group"
TRAIN_GROUP, ROLLOUT_GROUP = "trainer", "rollout"


def layout(miles_flags: list[str]) -> tuple[int, int] | None:
    """(training GPUs, rollout GPUs) from Miles' own layout flags, or None when one is missing."""
    p = argparse.ArgumentParser(add_help=False)
    for flag in ("--actor-num-nodes", "--actor-num-gpus-per-node", "--rollout-num-gpus"):
        p.add_argument(flag, type=int)
    a, _ = p.parse_known_args(miles_flags)
    if None in (a.actor_num_nodes, a.actor_num_gpus_per_node, a.rollout_num_gpus):
        return None
    return a.actor_num_nodes * a.actor_num_gpus_per_node, a.rollout_num_gpus


def pin(module, train_gpus: int, rollout_gpus: int) -> None:
    """Replace ``module.placement_group`` and ``module.sort_key`` (Miles' placement_group module)."""
    make, order = module.placement_group, module.sort_key

    def placement_group(bundles, *args, **kwargs):
        if len(bundles) == train_gpus + rollout_gpus and "bundle_label_selector" not in kwargs:
            kwargs["bundle_label_selector"] = [
                {NODE_GROUP_LABEL: TRAIN_GROUP if i < train_gpus else ROLLOUT_GROUP} for i in range(len(bundles))]
        return make(bundles, *args, **kwargs)

    def sort_key(info):
        index = info[0]
        return (0 if index < train_gpus else 1, order(info))

    module.placement_group, module.sort_key = placement_group, sort_key


def main(argv: list[str]) -> None:
    entry = argv[0]
    sys.path.insert(0, os.path.dirname(os.path.abspath(entry)))  # as `python3 <entry>` would
    gpus = layout(argv[1:])
    if gpus is not None:
        import miles.ray.placement_group as module  # noqa: PLC0415  (once the entry point's path is set)
        pin(module, *gpus)
    sys.argv = argv
    runpy.run_path(entry, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
