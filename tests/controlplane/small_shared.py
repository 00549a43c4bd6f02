"""``p5en-small``: p5en-shared with 4 train and 8 rollout nodes (and 2 reward nodes of 4 GPUs: 104 GPUs)
and team shares scaled to them, so that Volcano's queue limits decide, not only the teams' ResourceQuotas:

- alpha: train 16/24/32, rollout 40/48/64 (guarantee/deserved/cap); its queue limits (one per pool, the pool's
  GPUs less the other team's guarantee there) are train 32, rollout 48, below its rollout quota (64);
- beta: train 0/8/16, rollout 16/16/32; limits train 16 (32 - 16), rollout 24 (64 - 40), below its rollout
  quota (32);
- ``checkpointMinutes`` 1, the least the schema allows: a reclaimed or preempted run's pods have 60 s of
  grace (the reclaim bound of ``test_cp_reclaim``).
Both teams' deserved shares fill each pool, so a team above its deserved share on a pool is reclaimable there
whenever the other team is within its own and it keeps its guarantee on every pool."""

from __future__ import annotations

from conftest import recorded
from kubernetes import client

from controlplane.kube import eventually
from controlplane.platform import Platform
from controlplane.session import variant_platform_of

STACK, NAME = "p5en-shared", "p5en-small"
NODES = {"train": 4, "rollout": 8}
SHARES = {"alpha": {"train": (16, 24, 32), "rollout": (40, 48, 64)},
          "beta": {"train": (0, 8, 16), "rollout": (16, 16, 32)}}
CHECKPOINT_MINUTES = 1


def _small(nodes: dict[str, int], shares: dict[str, dict[str, tuple[int, int, int]]]):
    def change(platform: dict) -> None:
        for pool in platform["pools"]:
            if pool["name"] in nodes:
                pool["nodes"] = {"min": 0, "desired": nodes[pool["name"]], "max": nodes[pool["name"]]}
        for team in platform["workloads"]["teams"]:
            team["gpus"] = {pool: dict(zip(("guarantee", "deserved", "cap"), share))
                            for pool, share in shares[team["name"]].items()}
        platform["workloads"].setdefault("capacityBlockEnd", {})["checkpointMinutes"] = CHECKPOINT_MINUTES
    return change


def small_shared(name: str = NAME, nodes: dict[str, int] = NODES,
                 shares: dict[str, dict[str, tuple[int, int, int]]] = SHARES) -> Platform:
    """The platform (``p5en-small``, or the variant ``name`` with those pool sizes and team shares), once every
    PersistentVolumeClaim of the graph is bound: until the PV controller has bound a team's checkpoint claim,
    Volcano's VolumeBinding pre-predicate refuses every pod of the team's runs ("pod has unbound immediate
    PersistentVolumeClaims"), which a test would read as a run waiting."""
    platform = variant_platform_of(STACK, name, _small(nodes, shares), recorded)
    core = client.CoreV1Api(platform.cp.client())
    eventually("every PersistentVolumeClaim bound", lambda: all(
        c.status.phase == "Bound" for c in core.list_persistent_volume_claim_for_all_namespaces().items), 120)
    return platform
