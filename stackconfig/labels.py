"""The labels every platform node carries: which pool it belongs to and that pool's role; the per-pool GPU
resource name.

Constants and a name built from them, importing nothing, so that code that reads nodes offline (the
benchmark report) need not import the stack schema."""

LABEL_PREFIX = "rl.platform"
ROLE_LABEL = f"{LABEL_PREFIX}/role"
POOL_LABEL = f"{LABEL_PREFIX}/pool"


def pool_gpu_resource(pool: str) -> str:
    """The extended resource each node of GPU pool ``pool`` advertises beside ``nvidia.com/gpu``, as many as
    its GPUs, and a team pod on that pool requests in the same count: what the team Queues and ResourceQuotas
    count per pool (docs/design/scheduling.md, "Per-pool guarantees"). A pool name (``stackconfig.stack.Pool``:
    ``^[a-z][a-z0-9-]{0,23}$``) keeps it a valid extended resource name: a domain prefix other than
    ``kubernetes.io``, a name part under 63 characters."""
    return f"{LABEL_PREFIX}/gpu-{pool}"


HEAD_SLOT_RESOURCE = f"{LABEL_PREFIX}/head-slot"
"""The extended resource each node of the head pool advertises, as many as the run heads it holds
(``workloads.derive.layout.heads_per_node``), and every run head requests one of: a team's ResourceQuota
bounds it at the team's ``maxRuns`` and counts a Terminating head until its grace ends, so a team's deleted
runs whose heads still stop take the team's own runs, not another team's head room (docs/design/tenancy.md,
"Head pool")."""
