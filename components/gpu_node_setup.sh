#!/bin/bash
# rl.platform GPU node setup (components/gpu_node_boot.py): gdrdrv, PeerMappingOverride, HMM off in
# nvidia_uvm, EFA driver check, and the node labels kubelet registers with. Nothing is labelled true
# unless verified here.
set -euo pipefail

readonly WANT_PEER_MAPPING=@WANT_PEER_MAPPING@
readonly WANT_HMM_OFF=@WANT_HMM_OFF@
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
readonly UVM_OPTION='@UVM_OPTION@'

R="${RL_GPU_SETUP_ROOT:-}"  # tests only: a fake root
readonly R
readonly SELF="$R@SELF@"
readonly UNIT="$R/etc/systemd/system/@UNIT_NAME@"
readonly DROPIN="$R@DROPIN@"
readonly MODPROBE_CONF="$R@MODPROBE_CONF@"
readonly UVM_MODPROBE_CONF="$R@UVM_MODPROBE_CONF@"
readonly STAMP="$R/var/lib/rl-gpu-node-setup/gdrdrv.stamp"

GDRCOPY=false
PEER_MAPPING=false
HMM_OFF=false
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
    && [[ "$WANT_PEER_MAPPING" == 0 || "$PEER_MAPPING" == true ]] \
    && [[ "$WANT_HMM_OFF" == 0 || "$HMM_OFF" == true ]]; then
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
Description=rl.platform GPU node setup (gdrdrv, PeerMappingOverride, HMM off, EFA driver, node labels)
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

# nvidia_uvm's uvm_disable_hmm is a read-only bool module parameter: Y once loaded with the option.
hmm_disabled() {
  [[ "$(cat "$R/sys/module/nvidia_uvm/parameters/uvm_disable_hmm" 2>/dev/null || true)" == Y ]]
}

hmm_off() {
  if ! grep -qxF "$UVM_OPTION" "$UVM_MODPROBE_CONF" 2>/dev/null; then
    { mkdir -p "${UVM_MODPROBE_CONF%/*}" && printf '%s\n' "$UVM_OPTION" > "$UVM_MODPROBE_CONF"; } \
      || fail "cannot write $UVM_MODPROBE_CONF" || return
  fi
  if [[ -d "$R/sys/module/nvidia_uvm" ]] && ! hmm_disabled; then
    log "nvidia_uvm was loaded with HMM on: reloading it"
    modprobe -r nvidia_uvm || fail "cannot unload nvidia_uvm to turn HMM off" || return
  fi
  if [[ ! -d "$R/sys/module/nvidia_uvm" ]]; then
    modprobe nvidia_uvm || fail "modprobe nvidia_uvm failed" || return
  fi
  hmm_disabled || fail "uvm_disable_hmm is not Y in /sys/module/nvidia_uvm/parameters" || return
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
    if [[ "$WANT_HMM_OFF" == 1 ]]; then
      if hmm_off; then HMM_OFF=true; fi
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
