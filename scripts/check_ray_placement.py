"""Check, on a real Ray, what the Miles launcher (workloads/pod/miles_launcher.py) relies on: a node
started with RAY_NODE_TYPE_NAME=<group> (as KubeRay starts every pod of a worker group) carries the
label ray.io/node-group=<group>, and a placement group's bundle_label_selector puts each bundle on
a node of its group. Needs Ray (the image's version) and four local raylets; no GPUs (fake counts):

    ray start --head --num-gpus=0 --num-cpus=2 --port=6390 --include-dashboard=false
    RAY_NODE_TYPE_NAME=rollout ray start --address=127.0.0.1:6390 --num-gpus=2 --num-cpus=2
    RAY_NODE_TYPE_NAME=trainer ray start --address=127.0.0.1:6390 --num-gpus=2 --num-cpus=2
    RAY_NODE_TYPE_NAME=rollout ray start --address=127.0.0.1:6390 --num-gpus=2 --num-cpus=2
    python scripts/check_ray_placement.py; ray stop --force
"""
import ray
from ray.util.placement_group import placement_group, placement_group_table
ray.init(address="auto", logging_level="ERROR")
labels = {n["NodeID"]: n.get("Labels", {}).get("ray.io/node-group") for n in ray.nodes() if n["Alive"]}
print("node groups:", sorted(v or "-" for v in labels.values()))
sel = [{"ray.io/node-group": "trainer"}] * 2 + [{"ray.io/node-group": "rollout"}] * 4
pg = placement_group([{"GPU": 1, "CPU": 1}] * 6, strategy="PACK", bundle_label_selector=sel)
ray.get(pg.ready(), timeout=60)
where = placement_group_table(pg)["bundles_to_node_id"]
got = [labels[where[i]] for i in range(6)]
print("bundle -> node group:", got)
assert got == ["trainer"] * 2 + ["rollout"] * 4
print("OK")
