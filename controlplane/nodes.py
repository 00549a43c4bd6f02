"""kwok Node objects shaped like a stack's node groups, every figure from the code that sizes them for real.

Per node of a pool (``pool.nodes.desired`` of them, or a count the test asks for):
- capacity and allocatable: ``workloads.derive.resources.allocatable`` (vCPU less EKS kubeReserved,
  memory less VM overhead, kubeReserved and eviction threshold, pre-allocated 2-MiB huge pages, GPUs, the
  EFA devices the device plugin advertises, max pods), the instance catalog behind it; on a GPU node also its
  pool's own GPU resource, as many as its GPUs (``stackconfig.labels.pool_gpu_resource``: what the platform's
  advertiser, ``nodes.pool_resources``, writes into the node's status); on a head-pool node its head slots
  (``stackconfig.labels.HEAD_SLOT_RESOURCE``, ``nodes.pool_resources.head_slots``: the advertiser's figure);
- labels: the pool's and its node setup's (``WorkloadModel.node_labels``), the well-known ones the kubelet
  and EKS set (hostname, OS, architecture, instance type, zone, node group, capacity type) and the EKS
  network-topology labels (``EKS_NETWORK_LAYERS``; simulated: one layer-1 and layer-2 node above the zone's
  GPU nodes, one layer-3 node per ``NODES_PER_LAYER3`` nodes of a pool in a zone: a network node has one parent);
- taints: those the node registers with (``components.gpu_node_setup.registration_taints``: the pool's, and
  the burn-in taint on GPU nodes while the stack's burn-in is on), unless the test says the burn-in passed:
  then the pool's taints and the burn-in's ``passed`` result label.
"""

from __future__ import annotations

import hashlib

from stackconfig.labels import HEAD_SLOT_RESOURCE, pool_gpu_resource
from stackconfig.stack import CapacityType, Pool
from components.gpu_node_setup import registration_taints
from nodes.marks import PASSED, RESULT_LABEL
from nodes.pool_resources import head_slots
from workloads.derive.model import WorkloadModel
from workloads.derive.resources import EFA, GPU, HUGEPAGES, allocatable
from workloads.derive.topology import EKS_NETWORK_LAYERS

from controlplane.cluster import KWOK_ANNOTATION

NODES_PER_LAYER3 = 16
EKS_CAPACITY_TYPE = {CapacityType.ON_DEMAND: "ON_DEMAND", CapacityType.SPOT: "SPOT",
                     CapacityType.CAPACITY_BLOCK: "CAPACITY_BLOCK", CapacityType.ODCR: "ON_DEMAND"}
"""``eks.amazonaws.com/capacityType`` as EKS sets it (an ODCR-targeted group launches On-Demand)."""


def node_name(pool: Pool, index: int) -> str:
    """``<pool>-<index>``, three digits."""
    return f"{pool.name}-{index:03d}"


def zone(cfg, pool: Pool, index: int) -> str:
    """GPU and reserved pools live in the stack's one zone; others alternate over both."""
    if pool.single_az:
        return cfg.availability_zone
    return (cfg.availability_zone, cfg.secondary_availability_zone)[index % 2]


def quantities(pool: Pool, model: WorkloadModel) -> dict[str, str]:
    """A node's capacity (= allocatable) as Kubernetes quantities: CPU, memory, pods, root volume, and the
    huge pages, GPUs (and as many of the pool's own GPU resource) and EFA devices the pool's nodes advertise; a
    head-pool node's head slots."""
    alloc = allocatable(pool, model.settings.efa_devices)
    out = {"cpu": f"{alloc.millicpu}m", "memory": str(alloc.memory), "pods": str(alloc.pods),
           "ephemeral-storage": f"{pool.root_volume_gib}Gi"}
    if alloc.hugepages:
        out[HUGEPAGES] = str(alloc.hugepages)
    if alloc.gpus:
        out[GPU] = out[pool_gpu_resource(pool.name)] = str(alloc.gpus)
    if alloc.efa:
        out[EFA] = str(alloc.efa)
    if pool.name == model.head_pool.name:
        out[HEAD_SLOT_RESOURCE] = str(head_slots(model))
    return out


def node(cfg, model: WorkloadModel, pool: Pool, index: int, proven: bool = True) -> dict:
    """The Node object of the pool's ``index``-th node (module docstring: what it carries); ``proven``: the
    burn-in already passed it."""
    name, where = node_name(pool, index), zone(cfg, pool, index)
    labels = {**model.node_labels(pool), "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": pool.instance_type,
              "topology.kubernetes.io/zone": where, "topology.kubernetes.io/region": cfg.region,
              "eks.amazonaws.com/nodegroup": pool.name,
              "eks.amazonaws.com/capacityType": EKS_CAPACITY_TYPE[pool.capacity.type],
              "type": "kwok"}
    if pool.instance.is_gpu:
        layer1, layer2, layer3 = EKS_NETWORK_LAYERS
        labels |= {layer1: f"nn-{where}-1", layer2: f"nn-{where}-2", layer3: f"nn-{where}-{pool.name}-{index // NODES_PER_LAYER3}"}
    if proven and cfg.burn_in.enabled and pool.instance.is_gpu:
        labels[RESULT_LABEL] = PASSED  # what the burn-in agent writes with the taint lifted (nodes.marks)
    taints = pool.taints if proven else registration_taints(pool, cfg.burn_in.enabled)
    resources = quantities(pool, model)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": {KWOK_ANNOTATION: "fake"}},
            "spec": {"taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints],
                     "providerID": f"aws:///{where}/i-{hashlib.sha256(name.encode()).hexdigest()[:17]}"},
            "status": {"capacity": resources, "allocatable": resources}}


def csi_node(node_name: str, drivers: list[str]) -> dict:
    """What the kubelet registers when a CSI driver's node plugin starts on the node: a CSINode naming the
    driver, with no attach limit (the FSx CSI node plugin reports none). Volcano's scheduler counts each
    CSI volume a pod mounts as ``attachable-volumes-csi-<driver>`` and gives a node that much only from its
    CSINode (volcano pkg/scheduler/cache/event_handlers.go, ``setCSIResourceOnNode``): without it no pod
    with a file-system claim is ever allocatable."""
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": node_name},
            "spec": {"drivers": [{"name": d, "nodeID": node_name, "topologyKeys": None} for d in drivers]}}


def stack_nodes(cfg, model: WorkloadModel, counts: dict[str, int] | None = None, proven: bool = True,
                csi_drivers: list[str] = ()) -> list[dict]:
    """Every node of the stack's pools at their desired size (or ``counts[pool]``), each followed by its
    CSINode when the stack runs CSI node plugins on every node (``csi_drivers``)."""
    out = []
    for pool in cfg.pools:
        for i in range((counts or {}).get(pool.name, pool.nodes.desired)):
            out.append(node(cfg, model, pool, i, proven))
            if csi_drivers:
                out.append(csi_node(node_name(pool, i), list(csi_drivers)))
    return out


def node_objects(cfg, model: WorkloadModel, name: str, proven: bool = True, csi_drivers: list[str] = ()) -> list[dict]:
    """The objects ``stack_nodes`` makes for the node ``name`` (``<pool>-<index>``): to bring a deleted node back."""
    pool_name, index = name.rsplit("-", 1)
    pool = next(p for p in cfg.pools if p.name == pool_name)
    return [node(cfg, model, pool, int(index), proven), *([csi_node(name, list(csi_drivers))] if csi_drivers else [])]
