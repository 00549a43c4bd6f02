"""GpuNodeSetup: what a GPU pool's nodes must do on the host before kubelet starts, for DeepEP V2.

DeepEP V2 runs on NCCL GIN through aws-ofi-nccl. Both GIN modes need GDRCopy >= 2.5 (runtime and the
``gdrdrv`` kernel module); the GPU-initiated mode (EFA-GDA, ``NCCL_GIN_TYPE=5``) runs on the families
the instance catalog marks ``gin_gda`` only (p5en, p6-b200 and p6-b300) and also needs the NVIDIA driver option ``PeerMappingOverride=1`` and an EFA kernel
driver >= 3.3.0 (aws/aws-ofi-nccl@2daf7d3:doc/gin-getting-started.md; aws/aws-ofi-nccl#1369 and PR
#1371). The AL2023 NVIDIA AMI ships none of gdrdrv, the option or that EFA driver.

GPU-initiated nodes also run nvidia_uvm with HMM off (``uvm_disable_hmm=1``): AWS's DeepEP V2 GPU-initiated
admission on p6-b200 with the EFA 3.3.0g driver (the one GDA needs) panicked the kernel in the device-memory
mapping path NVIDIA UVM calls (``__init_zone_device_page``), and its scored rerun required HMM disabled on every
host (awslabs/awsome-distributed-ai@f834b300 micro-benchmarks/expert-parallelism/ep-backend-comparison/
RESULTS-b200.md, "Correctness and admission" and "Separate EFA 3.3.0g revalidation"). That path is UVM's HMM
device memory and the driver stack is the same on every ``gin_gda`` family, so every GPU-initiated setup turns
it off (nothing here uses HMM: CUDA allocations and NCCL do not). How the setup reaches the host:
``components.gpu_node_boot``.

A pod that needs the capability selects ``capability_labels``; a node on which a step failed carries
the label ``false`` and never receives it.
"""

from __future__ import annotations

from catalog import gda_families
from stackconfig.stack import LABEL_PREFIX, Pool, Taint

from .gpu_node_boot import LABEL_EFA_GDA, LABEL_GDRCOPY, GpuNodeSetup

MIN_EFA_DRIVER_FOR_GDA = "3.3.0"
"""aws/aws-ofi-nccl#1369 (efa.ko >= 3.3.0, the completion-counter API), documented by PR #1371; the
EFA installer 1.50.0 ships it. amzn/amzn-drivers@64788ef:kernel/linux/efa/src/efa_main.c:40-51 is 3.1.0."""


BURN_IN_TAINT = Taint(key=f"{LABEL_PREFIX}/burn-in", value="pending")
"""Every GPU node registers with it (``registration_taints``) and keeps it until its burn-in passes
(``nodes/``): no pod of a run tolerates it. DaemonSets that reach GPU nodes by tolerating every taint
(the FSx CSI node plugin's ``tolerateAllTaints``; the EKS add-ons, which already run there beside the
``nvidia.com/gpu`` taint they do not name) are not held; the device plugins name their taints and add
this one (``components.device_plugins.gpu_taints``)."""

QUARANTINE_TAINT = Taint(key=f"{LABEL_PREFIX}/quarantine", value="failed")
"""Put on a node whose burn-in failed (``nodes.marks.result_patch``); no node group registers it, so an
update of a node group's taints never lifts it. Tolerated only by the burn-in DaemonSets (a re-test) and
the device plugins (a re-test needs the node's GPUs and EFA devices advertised)."""


def registration_taints(pool: Pool, burn_in: bool) -> tuple[Taint, ...]:
    """The taints a pool's nodes register with: the pool's own, plus ``BURN_IN_TAINT`` on GPU pools when
    the stack's burn-in is on. They go in the managed node group's one taint list, which EKS hands kubelet
    as one ``--register-with-taints`` flag at registration (EKS user guide, node-taints-managed-node-groups).
    Not a second flag in a NodeConfig: kubelet keeps only the last ``--register-with-taints`` it is given
    (kubernetes/kubernetes pkg/util/flag/flags.go, ``RegisterWithTaintsVar.Set`` replaces the list), and
    nodeadm appends every config's flags (amazon-eks-ami@81fec2e:nodeadm/internal/api/merge.go:46-58),
    so one of the two lists would be lost."""
    return (*pool.taints, BURN_IN_TAINT) if burn_in and pool.instance.is_gpu else pool.taints




def for_pool(pool: Pool, deepep_v2: bool, gpu_initiated: bool) -> GpuNodeSetup:
    """The setup a pool's nodes need for the run's DeepEP mode. Families for GPU-initiated EFA: the
    catalog's ``gin_gda``; both GIN modes need GDRCopy 2.5 (aws/aws-ofi-nccl@2daf7d3:doc/gin-getting-started.md:13)."""
    if not pool.instance.is_gpu:
        return GpuNodeSetup()
    if gpu_initiated and not deepep_v2:
        raise ValueError("workloads.run.deepep.ginBackend: gpu (GPU-initiated EFA) only applies to DeepEP "
                         "version v2; allowed: proxy, auto")
    if not deepep_v2:
        return GpuNodeSetup()
    if not gpu_initiated:
        return GpuNodeSetup(gdrcopy=True)
    if not pool.instance.gin_gda:
        raise ValueError(f"workloads.run.deepep.ginBackend: GPU-initiated EFA runs on "
                         f"{', '.join(gda_families())} only, pool {pool.name!r} is {pool.instance_type}; "
                         f"allowed: proxy, auto")
    if not pool.efa_enabled:
        raise ValueError(f"workloads.run.deepep.ginBackend: GPU-initiated EFA needs EFA, pool {pool.name!r} has "
                         f"efa: false; allowed: proxy, auto")
    return GpuNodeSetup(gdrcopy=True, peer_mapping_override=True, min_efa_driver=MIN_EFA_DRIVER_FOR_GDA,
                        uvm_hmm_off=True)



def capability_labels(setup: GpuNodeSetup) -> dict[str, str]:
    """The node labels a pod of this configuration must select. Set by kubelet at registration from
    ``--node-labels`` (nodeadm appends every config's kubelet flags:
    awslabs/amazon-eks-ami@81fec2e:nodeadm/internal/api/merge.go:46-58); ``efa-driver`` is informational."""
    labels = {LABEL_GDRCOPY: "true"} if setup.gdrcopy else {}
    if setup.gpu_initiated:
        labels[LABEL_EFA_GDA] = "true"
    return labels

