"""GpuNodeSetup: what a GPU pool's nodes must do on the host before kubelet starts, for DeepEP V2.

DeepEP V2 runs on NCCL GIN through aws-ofi-nccl. Both GIN modes need GDRCopy >= 2.5 (runtime and the
``gdrdrv`` kernel module); the GPU-initiated mode (EFA-GDA, ``NCCL_GIN_TYPE=5``) runs on the families
the instance catalog marks ``gin_gda`` only (p5en, p6-b200 and p6-b300) and also needs the NVIDIA driver option ``PeerMappingOverride=1`` and an EFA kernel
driver >= 3.3.0 (aws/aws-ofi-nccl@2daf7d3:doc/gin-getting-started.md; aws/aws-ofi-nccl#1369 and PR
#1371). The AL2023 NVIDIA AMI ships none of gdrdrv, the option or that EFA driver.

How it reaches the node (awslabs/amazon-eks-ami@81fec2e, templates/al2023/runtime/):
- ``nodeadm-config.service`` reads the ``application/node.eks.aws`` parts ``Before=cloud-init.service``;
  cloud-init runs ``text/cloud-boothook`` parts in its network stage (``Before=network-online.target``,
  canonical/cloud-init@04eacd0:systemd/cloud-init-network.service.tmpl:30, every boot) and
  ``text/x-shellscript`` parts once per instance in its final stage (cc_scripts_user); the AMI's
  ``nvidia-kmod-load.service`` installs the nvidia module ``After=network-online.target`` with no
  order against cloud-final; ``nodeadm-run.service`` starts kubelet ``After=... cloud-final.service``
  and reads ``file:///etc/eks/nodeadm.d/`` on top of user data.
- So: a boothook writes the modprobe option before nvidia is first loaded; the user-data script
  builds and loads gdrdrv, checks everything and writes a NodeConfig drop-in whose
  ``kubelet.flags`` ``--node-labels`` nodeadm appends to the user data's flags; it installs itself as a
  systemd unit ordered ``Before=nodeadm-run.service`` so a reboot (node auto-repair) reloads gdrdrv.

A pod that needs the capability selects ``capability_labels``; a node on which a step failed carries
the label ``false`` and never receives it.
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog import gda_families
from stackconfig.stack import LABEL_PREFIX, Pool, Taint

MIN_EFA_DRIVER_FOR_GDA = "3.3.0"
"""aws/aws-ofi-nccl#1369 (efa.ko >= 3.3.0, the completion-counter API), documented by PR #1371; the
EFA installer 1.50.0 ships it. amzn/amzn-drivers@64788ef:kernel/linux/efa/src/efa_main.c:40-51 is 3.1.0."""

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
    source: GdrcopySource | None = None
    """Where the tarball is staged; filled in by the platform (``Platform``) once the bucket exists."""

    def __post_init__(self) -> None:
        if (self.peer_mapping_override or self.min_efa_driver) and not self.gdrcopy:
            raise ValueError("GPU-initiated EFA needs GDRCopy on the node as well (aws-ofi-nccl GIN requirements)")
        if self.peer_mapping_override != (self.min_efa_driver is not None):
            raise ValueError("GPU-initiated EFA needs both PeerMappingOverride=1 and a minimum EFA driver")

    @property
    def gpu_initiated(self) -> bool:
        return self.min_efa_driver is not None


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
    return GpuNodeSetup(gdrcopy=True, peer_mapping_override=True, min_efa_driver=MIN_EFA_DRIVER_FOR_GDA)


def capability_labels(setup: GpuNodeSetup) -> dict[str, str]:
    """The node labels a pod of this configuration must select. Set by kubelet at registration from
    ``--node-labels`` (nodeadm appends every config's kubelet flags:
    awslabs/amazon-eks-ami@81fec2e:nodeadm/internal/api/merge.go:46-58); ``efa-driver`` is informational."""
    labels = {LABEL_GDRCOPY: "true"} if setup.gdrcopy else {}
    if setup.gpu_initiated:
        labels[LABEL_EFA_GDA] = "true"
    return labels


def peer_mapping_boothook() -> str:
    """A ``text/cloud-boothook`` part: cloud-init runs it in its network stage, every boot
    (canonical/cloud-init@04eacd0:doc/rtd/explanation/format/boothook.rst), and that stage is
    ``Before=network-online.target`` (systemd/cloud-init-network.service.tmpl:30) while the AMI's
    nvidia-kmod-load.service is ``After=network-online.target`` (amazon-eks-ami@81fec2e:
    templates/al2023/runtime/gpu/nvidia-kmod-load.service:4): the option is in place before the
    module is first loaded, so no reload is needed on a normal first boot."""
    return (f"#!/bin/sh\nmkdir -p /etc/modprobe.d\n"
            f"printf '%s\\n' '{NVIDIA_OPTION}' > {MODPROBE_CONF}\n")


def boot_script(setup: GpuNodeSetup) -> str:
    """The ``text/x-shellscript`` part (cloud-init final stage, once per instance:
    canonical/cloud-init@04eacd0:doc/rtd/explanation/format/user-data-script.rst), which runs before
    ``nodeadm-run.service`` (``After=... cloud-final.service``) starts kubelet. It builds gdrdrv from the
    pinned GDRCopy tree, fetched from the stack's bucket (``aws s3api get-object --checksum-mode ENABLED``:
    the CLI checks the SHA256 checksum S3 stored at upload; then the tree hash), with ``make driver``
    against the loaded nvidia module's source, as
    NVIDIA/gdrcopy@v2.5.2:README.md "from source" and :insmod.sh do, incl. ``mknod /dev/gdrdrv``),
    makes PeerMappingOverride effective (checked in /proc/driver/nvidia/params, reloading nvidia if it
    was loaded without it), reads the EFA driver version from /sys/module/efa/version (MODULE_VERSION
    of amzn/amzn-drivers@64788ef:kernel/linux/efa/src/efa_main.c:44-51, e.g. ``3.1.0g``) and writes the
    labels into /etc/eks/nodeadm.d/ (amazon-eks-ami@81fec2e:nodeadm/doc/examples.md:66-70). Nothing is
    labelled true unless verified; on any failure it logs why and exits 1 after labelling."""
    if not setup.gdrcopy:
        raise ValueError("boot_script: this setup needs nothing on the host")
    return _without_comments(_SCRIPT
            .replace("@WANT_PEER_MAPPING@", "1" if setup.peer_mapping_override else "0")
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
            .replace("@LABEL_GDRCOPY@", LABEL_GDRCOPY)
            .replace("@LABEL_EFA_GDA@", LABEL_EFA_GDA)
            .replace("@LABEL_EFA_DRIVER@", LABEL_EFA_DRIVER))


def user_data_parts(setup: GpuNodeSetup) -> list[tuple[str, str]]:
    """(content type, body) parts to add to the MIME user data beside the nodeadm part. nodeadm reads
    only ``application/node.eks.aws`` parts (amazon-eks-ami@81fec2e:nodeadm/internal/configprovider/
    mime.go:34-72); cloud-init handles the others whatever their order."""
    if not setup.gdrcopy:
        return []
    parts = [(BOOTHOOK, peer_mapping_boothook())] if setup.peer_mapping_override else []
    return [*parts, (SHELLSCRIPT, boot_script(setup))]


def _without_comments(script: str) -> str:
    """The script as the node gets it: whole-line comments dropped (the shebang kept). They stay in this
    file for readers; on the node they would only spend EC2's 16 KB user-data limit, which EKS shares
    with the NodeConfig part it appends (EKS user guide, launch-templates "user data")."""
    lines = script.splitlines()
    kept = [lines[0]] + [line for line in lines[1:] if not line.lstrip().startswith("#")]
    return "\n".join(kept) + "\n"


_SCRIPT = r"""#!/bin/bash
# rl.platform GPU node setup (components/gpu_node_setup.py): gdrdrv, PeerMappingOverride, EFA driver
# check, and the node labels kubelet registers with. Nothing is labelled true unless verified here.
set -euo pipefail

readonly WANT_PEER_MAPPING=@WANT_PEER_MAPPING@
readonly MIN_EFA_DRIVER="@MIN_EFA_DRIVER@"
# NVIDIA/gdrcopy v2.5.2; TREE_SHA256 hashes the sorted sha256sum list of the tag's files.
readonly GDRCOPY_VERSION="@GDRCOPY_VERSION@"
readonly GDRCOPY_COMMIT="@GDRCOPY_COMMIT@"
readonly GDRCOPY_TREE_SHA256="@GDRCOPY_TREE_SHA256@"
# Staged in the stack's bucket by pulumi up (components/gdrcopy_source.py), read through the S3 gateway endpoint.
readonly GDRCOPY_BUCKET="@GDRCOPY_BUCKET@"
readonly GDRCOPY_REGION="@GDRCOPY_REGION@"
readonly GDRCOPY_KEY="@GDRCOPY_KEY@"
readonly GDRDRV_MIN="@GDRDRV_MIN@"
readonly NVIDIA_OPTION='@NVIDIA_OPTION@'

R="${RL_GPU_SETUP_ROOT:-}"  # tests only: a fake root
readonly R
readonly SELF="$R@SELF@"
readonly UNIT="$R/etc/systemd/system/@UNIT_NAME@"
readonly DROPIN="$R@DROPIN@"
readonly MODPROBE_CONF="$R@MODPROBE_CONF@"
readonly STAMP="$R/var/lib/rl-gpu-node-setup/gdrdrv.stamp"

GDRCOPY=false
PEER_MAPPING=false
EFA_OK=false
EFA_DRIVER=none
PROBLEMS=()

log() {
  echo "rl-gpu-node-setup: $*" >&2
  logger -t rl-gpu-node-setup -- "$*" 2>/dev/null || true
}

# Records why a capability is off; use as `cmd || fail "why" || return`.
fail() {
  PROBLEMS+=("$*")
  log "FAILED: $*"
  return 1
}

# $1 >= $2 for dotted versions; a suffix after the numbers (efa's "3.1.0g") is ignored.
version_ge() {
  local a="${1%%[!0-9.]*}" b="${2%%[!0-9.]*}"
  [[ -n "$a" && -n "$b" ]] || return 1
  [[ "$(printf '%s\n%s\n' "$b" "$a" | sort -V | head -n 1)" == "$b" ]]
}

# A Kubernetes label value: [A-Za-z0-9._-], at most 63, alphanumeric at both ends; else "none".
label_value() {
  local v
  v="$(printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '-' | cut -c 1-63 | sed -E 's/^[^A-Za-z0-9]+//; s/[^A-Za-z0-9]+$//')"
  printf '%s' "${v:-none}"
}

write_labels() {
  local gda=false
  if [[ -n "$MIN_EFA_DRIVER" && "$GDRCOPY" == true && "$EFA_OK" == true ]] \
    && [[ "$WANT_PEER_MAPPING" == 0 || "$PEER_MAPPING" == true ]]; then
    gda=true
  fi
  local labels="@LABEL_GDRCOPY@=$GDRCOPY,@LABEL_EFA_GDA@=$gda,@LABEL_EFA_DRIVER@=$EFA_DRIVER"
  # nodeadm reads the drop-in folder only from AMI release v20251023 (amazon-eks-ami #2427: the
  # --config-source file:///etc/eks/nodeadm.d/ of nodeadm-run.service); an older AMI would ignore the
  # labels silently and pods selecting them would stay Pending: fail the boot loudly instead.
  if ! systemctl cat nodeadm-run.service 2>/dev/null | grep -q "file:///etc/eks/nodeadm.d/"; then
    log "nodeadm-run.service does not read /etc/eks/nodeadm.d/: AMI older than v20251023; labels not applied"
    return 1
  fi
  mkdir -p "${DROPIN%/*}" || { log "cannot create ${DROPIN%/*}"; return 1; }
  # A NodeConfig drop-in: nodeadm-run.service merges /etc/eks/nodeadm.d/ over user data and appends
  # kubelet flags, so these labels join the node group's own --node-labels.
  cat > "$DROPIN.tmp" <<EOF || { log "cannot write $DROPIN"; return 1; }
apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  kubelet:
    flags:
      - --node-labels=$labels
EOF
  mv -f "$DROPIN.tmp" "$DROPIN" || { log "cannot write $DROPIN"; return 1; }
  log "labels: $labels"
}

# Runs again on every later boot, before nodeadm-run.service (kubelet), after the AMI loads nvidia.
persist() {
  [[ "$(readlink -f "$0")" == "$(readlink -f "$SELF" 2>/dev/null || echo "$SELF")" ]] && return 0
  install -D -m 0755 "$0" "$SELF" || fail "cannot install $SELF" || return
  mkdir -p "${UNIT%/*}" || fail "cannot create ${UNIT%/*}" || return
  cat > "$UNIT" <<EOF || fail "cannot write $UNIT" || return
[Unit]
Description=rl.platform GPU node setup (gdrdrv, PeerMappingOverride, EFA driver, node labels)
Wants=nvidia-kmod-load.service
After=nvidia-kmod-load.service
Before=nodeadm-run.service kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=${SELF#"$R"}
TimeoutStartSec=900
StandardError=journal+console

[Install]
WantedBy=multi-user.target
EOF
  systemctl daemon-reload || fail "systemctl daemon-reload failed" || return
  systemctl enable "${UNIT##*/}" || fail "cannot enable ${UNIT##*/}: a reboot would lose gdrdrv" || return
}

# The AMI's nvidia-kmod-load.service has no order against cloud-final: wait for it, then load nvidia.
nvidia_ready() {
  systemctl start nvidia-kmod-load.service || fail "nvidia-kmod-load.service failed" || return
  if [[ ! -d "$R/sys/module/nvidia" ]]; then
    modprobe nvidia || fail "modprobe nvidia failed" || return
  fi
  [[ -r "$R/proc/driver/nvidia/params" ]] || fail "nvidia is not loaded (no /proc/driver/nvidia/params)" || return
}

peer_mapping_effective() {
  grep -q 'PeerMappingOverride=1' "$R/proc/driver/nvidia/params"
}

reload_nvidia() {
  local units=() mods=() u m
  for u in nvidia-persistenced nvidia-fabricmanager nvidia-imex; do
    if systemctl -q is-active "$u"; then units+=("$u"); fi
  done
  for m in gdrdrv efa_nv_peermem nvidia_peermem nvidia_uvm nvidia_drm nvidia_modeset; do
    if [[ -d "$R/sys/module/$m" ]]; then mods+=("$m"); fi
  done
  if ((${#units[@]})); then systemctl stop "${units[@]}" || return; fi
  modprobe -r "${mods[@]}" nvidia || return
  modprobe nvidia || return
  for m in "${mods[@]}"; do
    if [[ "$m" != gdrdrv ]]; then modprobe "$m" || return; fi
  done
  if ((${#units[@]})); then systemctl start "${units[@]}" || return; fi
}

peer_mapping() {
  if ! grep -qxF "$NVIDIA_OPTION" "$MODPROBE_CONF" 2>/dev/null; then
    { mkdir -p "${MODPROBE_CONF%/*}" && printf '%s\n' "$NVIDIA_OPTION" > "$MODPROBE_CONF"; } \
      || fail "cannot write $MODPROBE_CONF" || return
  fi
  peer_mapping_effective && return 0
  log "nvidia was loaded without PeerMappingOverride=1: reloading it"
  reload_nvidia || fail "reloading the nvidia module failed" || return
  peer_mapping_effective \
    || fail "PeerMappingOverride=1 not in /proc/driver/nvidia/params (another NVreg_RegistryDwords?)" || return
}

tree_sha256() {
  (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d ' ' -f 1)
}

# The loaded nvidia module's source: gdrdrv built for the open flavour cannot load with the proprietary one.
nvidia_source() {
  local nvver="$1" want=n have d f
  if modinfo -F license nvidia 2>/dev/null | grep -q GPL; then want=y; fi
  for d in "$R"/usr/src/nvidia*-"$nvver" "$R"/usr/src/kernel-modules/nvidia*-"$nvver"; do
    [[ -d "$d" ]] || continue
    f="$(find -L "$d" -name nv-p2p.c -print -quit 2>/dev/null || true)"
    [[ -n "$f" ]] || continue
    have=n
    if grep -r MODULE_LICENSE "${f%/*}" | grep -q GPL; then have=y; fi
    if [[ "$have" == "$want" ]]; then printf '%s' "${f%/*}"; return 0; fi
  done
  return 1
}

build_gdrdrv() {
  local kver="$1" nvver="$2" pkg=kernel-devel tmp nvsrc tree
  if [[ ! -d "$R/lib/modules/$kver/build" ]]; then
    case "$kver" in 6.12.*) pkg=kernel6.12-devel ;; 6.18.*) pkg=kernel6.18-devel ;; esac
    dnf install -y "$pkg-$kver" || fail "no headers for kernel $kver ($pkg-$kver)" || return
  fi
  nvsrc="$(nvidia_source "$nvver")" || fail "no source of the loaded nvidia $nvver under /usr/src" || return
  tmp="$(mktemp -d)" || fail "mktemp failed" || return
  [[ -n "$GDRCOPY_BUCKET" ]] || fail "no GDRCopy tarball staged for this node group" || return
  # The AL2023 EKS AMI ships AWS CLI v2 (amazon-eks-ami@81fec2e:templates/al2023/provisioners/
  # install-worker.sh:110-130); --checksum-mode ENABLED makes it verify the object's stored checksum.
  aws s3api get-object --region "$GDRCOPY_REGION" --bucket "$GDRCOPY_BUCKET" --key "$GDRCOPY_KEY" \
    --checksum-mode ENABLED "$tmp/gdrcopy.tar.gz" > /dev/null \
    || fail "download of s3://$GDRCOPY_BUCKET/$GDRCOPY_KEY failed" || return
  tar -xzf "$tmp/gdrcopy.tar.gz" -C "$tmp" || fail "cannot unpack GDRCopy" || return
  tree="$tmp/gdrcopy-$GDRCOPY_COMMIT"
  [[ "$(tree_sha256 "$tree")" == "$GDRCOPY_TREE_SHA256" ]] \
    || fail "GDRCopy $GDRCOPY_VERSION source does not match its pinned tree hash" || return
  if ! (cd "$tree" && make driver NVIDIA_SRC_DIR="$nvsrc" KVER="$kver") > "$tmp/build.log" 2>&1; then
    tail -n 40 "$tmp/build.log" >&2
    fail "building gdrdrv $GDRCOPY_VERSION against $nvsrc failed" || return
  fi
  install -D -m 0644 "$tree/src/gdrdrv/gdrdrv.ko" "$R/lib/modules/$kver/extra/gdrdrv.ko" \
    || fail "cannot install gdrdrv.ko" || return
  depmod -a "$kver" || fail "depmod failed" || return
  if [[ -d "$R/sys/module/gdrdrv" ]]; then rmmod gdrdrv || fail "cannot unload the old gdrdrv" || return; fi
  rm -rf "$tmp"
}

gdrcopy() {
  local kver nvver stamp major
  kver="$(uname -r)"
  nvver="$(cat "$R/sys/module/nvidia/version" 2>/dev/null)" || fail "nvidia version unknown" || return
  stamp="$GDRCOPY_COMMIT $kver $nvver"
  if [[ "$(cat "$STAMP" 2>/dev/null || true)" != "$stamp" ]]; then
    build_gdrdrv "$kver" "$nvver" || return
    { mkdir -p "${STAMP%/*}" && printf '%s\n' "$stamp" > "$STAMP"; } || fail "cannot write $STAMP" || return
  fi
  modprobe gdrdrv || fail "modprobe gdrdrv failed" || return
  version_ge "$(cat "$R/sys/module/gdrdrv/version" 2>/dev/null || true)" "$GDRDRV_MIN" \
    || fail "loaded gdrdrv is not >= $GDRDRV_MIN" || return
  major="$(awk '$2 == "gdrdrv" { print $1 }' "$R/proc/devices" 2>/dev/null || true)"
  [[ -n "$major" ]] || fail "gdrdrv has no device number in /proc/devices" || return
  rm -f "$R/dev/gdrdrv" || fail "cannot remove the old /dev/gdrdrv" || return
  mknod -m 666 "$R/dev/gdrdrv" c "$major" 0 || fail "mknod /dev/gdrdrv failed" || return
  [[ -c "$R/dev/gdrdrv" ]] || fail "/dev/gdrdrv is not a character device" || return
  GDRCOPY=true
}

efa_driver() {
  local v=""
  if [[ -r "$R/sys/module/efa/version" ]]; then
    v="$(cat "$R/sys/module/efa/version")"
  else
    v="$(modinfo -F version efa 2>/dev/null || true)"
  fi
  EFA_DRIVER="$(label_value "$v")"
  [[ -n "$MIN_EFA_DRIVER" ]] || return 0
  [[ -n "$v" ]] || fail "EFA kernel driver version unknown (efa not loaded, or an in-tree efa)" || return
  version_ge "$v" "$MIN_EFA_DRIVER" \
    || fail "EFA kernel driver $v < $MIN_EFA_DRIVER (GPU-initiated EFA needs EFA installer >= 1.50)" || return
  EFA_OK=true
}

main() {
  trap write_labels EXIT
  write_labels || true
  if persist && nvidia_ready; then
    if [[ "$WANT_PEER_MAPPING" == 1 ]]; then
      if peer_mapping; then PEER_MAPPING=true; fi
    fi
    gdrcopy || true
  fi
  efa_driver || true
  if ((${#PROBLEMS[@]})); then
    log "finished with ${#PROBLEMS[@]} problem(s); the capabilities above are labelled false"
    exit 1
  fi
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
"""
