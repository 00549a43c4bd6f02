"""How a GPU pool's setup (``GpuNodeSetup``) reaches the host: the MIME parts of the node's user data, a
boothook that writes the kernel module options and a script that builds gdrdrv, checks everything and
labels the node (``components.gpu_node_setup`` decides which pools get what).

How it reaches the node (awslabs/amazon-eks-ami@81fec2e, templates/al2023/runtime/):
- ``nodeadm-config.service`` reads the ``application/node.eks.aws`` parts ``Before=cloud-init.service``;
  cloud-init runs ``text/cloud-boothook`` parts in its network stage (``Before=network-online.target``,
  canonical/cloud-init@04eacd0:systemd/cloud-init-network.service.tmpl:30, every boot) and
  ``text/x-shellscript`` parts once per instance in its final stage (cc_scripts_user); the AMI's
  ``nvidia-kmod-load.service`` installs the nvidia module ``After=network-online.target`` with no
  order against cloud-final; ``nodeadm-run.service`` starts kubelet ``After=... cloud-final.service``
  and reads ``file:///etc/eks/nodeadm.d/`` on top of user data.
- So: a boothook writes the modprobe options before nvidia is first loaded; the user-data script
  builds and loads gdrdrv, checks everything and writes a NodeConfig drop-in whose
  ``kubelet.flags`` ``--node-labels`` nodeadm appends to the user data's flags; it installs itself as a
  systemd unit ordered ``Before=nodeadm-run.service`` so a reboot (node auto-repair) reloads gdrdrv.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stackconfig.stack import LABEL_PREFIX

GDRCOPY_VERSION = "2.5.2"
"""NVIDIA/gdrcopy tag v2.5.2 (2026-02-24): the newest 2.5.x; its only change over 2.5.1 is the
v6.15+ kernel build fix (CHANGELOG.md), which the AMI's kernel6.18 variant needs. GIN needs >= 2.5."""
GDRCOPY_COMMIT = "c91ad9f178e5fb729fc5b6dc62a77c3bb364d6c9"
"""``git rev-list -n1 v2.5.2`` in NVIDIA/gdrcopy."""
GDRCOPY_TREE_SHA256 = "5c01ebe56c8b27862f74870813980c7494e268e3e39c064804f863bfa9881abf"
"""sha256 of ``find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum`` over the v2.5.2 tree
(``git archive v2.5.2``; 75 regular files, no .gitattributes, so GitHub's archive has the same files)."""
GDRCOPY_URL = f"https://github.com/NVIDIA/gdrcopy/archive/{GDRCOPY_COMMIT}.tar.gz"
"""Where ``pulumi up`` fetches the tarball once to stage it (``components.gdrcopy_source``); nodes never do."""
GDRCOPY_KEY = f"platform/gdrcopy/gdrcopy-{GDRCOPY_COMMIT}.tar.gz"
"""The staged tarball in the stack's bucket (outside ``checkpoints/``, which FSx links), by commit."""
GDRDRV_MIN = "2.5"
"""gdrdrv's MODULE_VERSION is major.minor only (NVIDIA/gdrcopy@v2.5.2:src/gdrdrv/gdrdrv.h:31-34)."""

LABEL_GDRCOPY = f"{LABEL_PREFIX}/gdrcopy"
LABEL_EFA_GDA = f"{LABEL_PREFIX}/efa-gda"
LABEL_EFA_DRIVER = f"{LABEL_PREFIX}/efa-driver"

NODEADM_DROPIN = "/etc/eks/nodeadm.d/50-rl-gpu-capabilities.yaml"
MODPROBE_CONF = "/etc/modprobe.d/50-rl-peer-mapping-override.conf"
NVIDIA_OPTION = 'options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;"'
UNIT_NAME = "rl-gpu-node-setup.service"
SELF_PATH = "/usr/local/libexec/rl-gpu-node-setup"
UVM_MODPROBE_CONF = "/etc/modprobe.d/50-rl-uvm-disable-hmm.conf"
UVM_OPTION = "options nvidia_uvm uvm_disable_hmm=1"
"""HMM off in nvidia_uvm: a bool ``module_param(uvm_disable_hmm, bool, 0444)``, so it reads ``Y`` in
/sys/module/nvidia_uvm/parameters/uvm_disable_hmm once loaded with it (NVIDIA/open-gpu-kernel-modules@30e15d79
kernel-open/nvidia-uvm/uvm_hmm.c; HMM stays on by default on x86_64)."""


@dataclass(frozen=True)
class GdrcopySource:
    """Where a node fetches the pinned GDRCopy tarball: ``s3://<bucket>/GDRCOPY_KEY`` in ``region``,
    through the VPC's S3 gateway endpoint (components/network.py), with the node role's read grant."""

    bucket: str
    region: str


SHELLSCRIPT = "text/x-shellscript"
BOOTHOOK = "text/cloud-boothook"


@dataclass(frozen=True)
class GpuNodeSetup:
    """What a pool's nodes get. Empty (all off) for pools that need nothing."""

    gdrcopy: bool = False
    peer_mapping_override: bool = False
    min_efa_driver: str | None = None
    uvm_hmm_off: bool = False
    """nvidia_uvm loaded with ``uvm_disable_hmm=1`` (``components.gpu_node_setup``: with GPU-initiated EFA)."""
    source: GdrcopySource | None = None
    """Where the tarball is staged; filled in by the platform (``Platform``) once the bucket exists."""

    def __post_init__(self) -> None:
        if (self.peer_mapping_override or self.min_efa_driver) and not self.gdrcopy:
            raise ValueError("GPU-initiated EFA needs GDRCopy on the node as well (aws-ofi-nccl GIN requirements)")
        if self.peer_mapping_override != (self.min_efa_driver is not None):
            raise ValueError("GPU-initiated EFA needs both PeerMappingOverride=1 and a minimum EFA driver")
        if self.uvm_hmm_off and not self.gpu_initiated:
            raise ValueError("uvm_disable_hmm=1 is set with GPU-initiated EFA, where AWS found it needed")

    @property
    def gpu_initiated(self) -> bool:
        return self.min_efa_driver is not None


def options_boothook(setup: GpuNodeSetup) -> str:
    """A ``text/cloud-boothook`` part writing the module options: cloud-init runs it in its network stage,
    every boot (canonical/cloud-init@04eacd0:doc/rtd/explanation/format/boothook.rst), and that stage is
    ``Before=network-online.target`` (systemd/cloud-init-network.service.tmpl:30) while the AMI's
    nvidia-kmod-load.service is ``After=network-online.target`` (amazon-eks-ami@81fec2e:
    templates/al2023/runtime/gpu/nvidia-kmod-load.service:4): the options are in place before the
    modules are first loaded, so no reload is needed on a normal first boot."""
    options = [(NVIDIA_OPTION, MODPROBE_CONF)] if setup.peer_mapping_override else []
    options += [(UVM_OPTION, UVM_MODPROBE_CONF)] if setup.uvm_hmm_off else []
    return "#!/bin/sh\nmkdir -p /etc/modprobe.d\n" + "".join(f"printf '%s\\n' '{o}' > {f}\n" for o, f in options)


def boot_script(setup: GpuNodeSetup) -> str:
    """The ``text/x-shellscript`` part (cloud-init final stage, once per instance:
    canonical/cloud-init@04eacd0:doc/rtd/explanation/format/user-data-script.rst), which runs before
    ``nodeadm-run.service`` (``After=... cloud-final.service``) starts kubelet. It builds gdrdrv from the
    pinned GDRCopy tree, fetched from the stack's bucket (``aws s3api get-object --checksum-mode ENABLED``:
    the CLI checks the SHA256 checksum S3 stored at upload; then the tree hash), with ``make driver``
    against the loaded nvidia module's source, as
    NVIDIA/gdrcopy@v2.5.2:README.md "from source" and :insmod.sh do, incl. ``mknod /dev/gdrdrv``),
    makes PeerMappingOverride effective (checked in /proc/driver/nvidia/params, reloading nvidia if it
    was loaded without it) and HMM off (``uvm_disable_hmm`` read back ``Y``, reloading nvidia_uvm if it was
    loaded without it), reads the EFA driver version from /sys/module/efa/version (MODULE_VERSION
    of amzn/amzn-drivers@64788ef:kernel/linux/efa/src/efa_main.c:44-51, e.g. ``3.1.0g``) and writes the
    labels into /etc/eks/nodeadm.d/ (amazon-eks-ami@81fec2e:nodeadm/doc/examples.md:66-70). Nothing is
    labelled true unless verified; on any failure it logs why and exits 1 after labelling."""
    if not setup.gdrcopy:
        raise ValueError("boot_script: this setup needs nothing on the host")
    return _without_comments(_SCRIPT
            .replace("@WANT_PEER_MAPPING@", "1" if setup.peer_mapping_override else "0")
            .replace("@WANT_HMM_OFF@", "1" if setup.uvm_hmm_off else "0")
            .replace("@MIN_EFA_DRIVER@", setup.min_efa_driver or "")
            .replace("@GDRCOPY_VERSION@", GDRCOPY_VERSION)
            .replace("@GDRCOPY_COMMIT@", GDRCOPY_COMMIT)
            .replace("@GDRCOPY_TREE_SHA256@", GDRCOPY_TREE_SHA256)
            .replace("@GDRCOPY_BUCKET@", setup.source.bucket if setup.source else "")
            .replace("@GDRCOPY_REGION@", setup.source.region if setup.source else "")
            .replace("@GDRCOPY_KEY@", GDRCOPY_KEY)
            .replace("@GDRDRV_MIN@", GDRDRV_MIN)
            .replace("@SELF@", SELF_PATH)
            .replace("@UNIT_NAME@", UNIT_NAME)
            .replace("@DROPIN@", NODEADM_DROPIN)
            .replace("@MODPROBE_CONF@", MODPROBE_CONF)
            .replace("@NVIDIA_OPTION@", NVIDIA_OPTION)
            .replace("@UVM_MODPROBE_CONF@", UVM_MODPROBE_CONF)
            .replace("@UVM_OPTION@", UVM_OPTION)
            .replace("@LABEL_GDRCOPY@", LABEL_GDRCOPY)
            .replace("@LABEL_EFA_GDA@", LABEL_EFA_GDA)
            .replace("@LABEL_EFA_DRIVER@", LABEL_EFA_DRIVER))


def user_data_parts(setup: GpuNodeSetup) -> list[tuple[str, str]]:
    """(content type, body) parts to add to the MIME user data beside the nodeadm part. nodeadm reads
    only ``application/node.eks.aws`` parts (amazon-eks-ami@81fec2e:nodeadm/internal/configprovider/
    mime.go:34-72); cloud-init handles the others whatever their order."""
    if not setup.gdrcopy:
        return []
    parts = [(BOOTHOOK, options_boothook(setup))] if setup.peer_mapping_override or setup.uvm_hmm_off else []
    return [*parts, (SHELLSCRIPT, boot_script(setup))]


def _without_comments(script: str) -> str:
    """The script as the node gets it: whole-line comments dropped (the shebang kept). They stay in this
    file for readers; on the node they would only spend EC2's 16 KB user-data limit, which EKS shares
    with the NodeConfig part it appends (EKS user guide, launch-templates "user data")."""
    lines = script.splitlines()
    kept = [lines[0]] + [line for line in lines[1:] if not line.lstrip().startswith("#")]
    return "\n".join(kept) + "\n"


_SCRIPT = (Path(__file__).resolve().parent / "gpu_node_setup.sh").read_text()
"""The script's template (``@NAME@`` filled by ``boot_script``)."""
