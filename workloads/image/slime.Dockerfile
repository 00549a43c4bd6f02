# syntax=docker/dockerfile:1.7
#
# The image of software profile slime-0.2.4 (software/profiles.yaml): Slime's own release image for
# THUDM/slime v0.2.4 plus the EFA userspace an EKS pod needs. Build with the command
# `python -m workloads.cli.runs profiles slime-0.2.4 --build` prints (the profile's build arguments and tag).
#
# Base: slimerl/slime:<docker/version.txt>, which Slime's docker/justfile (_release-raw) pushes from
# docker/Dockerfile: FROM slimerl/sglang:v0.5.9 (CUDA 12.9, torch 2.9.1), NVIDIA Megatron-LM
# at MEGATRON_COMMIT 3714d81d patched by docker/patch/latest/megatron.patch, SGLang patched by
# docker/patch/latest/sglang.patch, Slime cloned at SLIME_COMMIT (default `main`) to /root/slime.
# version.txt at bd217a63 (tag v0.2.4) reads nightly-dev-20260329a. The release image clones `main`,
# so /root/slime is checked out here at the tag's commit and reinstalled (--no-deps, as Slime does).
# Not built here (no Docker engine where this repository is developed); the checks below fail the build.

ARG SLIME_IMAGE_TAG=nightly-dev-20260329a
FROM slimerl/slime:${SLIME_IMAGE_TAG}
ARG SLIME_IMAGE_TAG
ARG SLIME_COMMIT=bd217a63f113d74488170914e4d39e68c12e8cf0
ARG MEGATRON_COMMIT=3714d81d418c9f1bca4594fc35f9e8289f652862
ARG EXPECT_SGLANG=0.5.9
ARG RAY_VERSION=2.53.0
ARG EFA_INSTALLER_VERSION=1.50.0
ARG AWS_OFI_NCCL_VERSION=1.21.1

# Slime at the profile's commit (slime docker/Dockerfile:122-126 installs it the same way).
RUN cd /root/slime && git fetch --quiet origin "${SLIME_COMMIT}" && git checkout "${SLIME_COMMIT}" \
 && pip install -e . --no-deps

# Ray: KubeRay's rayVersion; Slime's requirements.txt leaves ray[default] unpinned. The base's torch, NCCL,
# SGLang and transformers are held where they are (a constraint file of their installed versions: pip
# fails rather than move them for Ray).
RUN python3 -c "import importlib.metadata as md; \
print('\n'.join(f'{d}=={md.version(d)}' for d in ('torch', 'sglang', 'transformers', 'nvidia-nccl-cu12')))" \
      > /tmp/keep.txt && cat /tmp/keep.txt \
 && pip install "ray[default]==${RAY_VERSION}" -c /tmp/keep.txt && rm /tmp/keep.txt
# Ray as KubeRay runs it, read from Ray's own METADATA: RAY_VERSION, and every requirement of its
# `default` extra (the head's dashboard and metrics agent) installed at a version Ray accepts.
# contracts/tests/test_image_ray.py runs this snippet against the ray 2.53.0 wheel's METADATA.
# contract: ray
RUN python3 - <<'EOF'
import importlib.metadata as md
import os
import sys

try:
    from packaging.requirements import Requirement
except ImportError:  # pip vendors it
    from pip._vendor.packaging.requirements import Requirement

have = md.version("ray")
want = os.environ["RAY_VERSION"]
problems = [] if have == want else [f"ray {have} installed, RAY_VERSION={want}"]
for r in map(Requirement, md.requires("ray") or []):
    if r.marker is None or not r.marker.evaluate({"extra": "default"}) or r.marker.evaluate({"extra": ""}):
        continue  # only what the default extra adds
    try:
        version = md.version(r.name)
    except md.PackageNotFoundError:
        problems.append(f"{r}: not installed")
        continue
    if not r.specifier.contains(version, prereleases=True):
        problems.append(f"{r}: {version} installed")
if problems:
    sys.exit("ray[default]:\n  " + "\n  ".join(problems))
print(f"ray {have} with its default extra")
EOF

# EFA userspace: the same installer step as workloads/image/Dockerfile (libfabric efa provider,
# rdma-core, aws-ofi-nccl 1.21.1, which supports NCCL >= 2.17.1: aws-ofi-nccl v1.21.1 RELEASENOTES.md:12),
# without its NGC branch (apt's libnccl2 2.28.3, held; why: workloads/image/Dockerfile).
RUN apt-get update -y && cd /tmp \
 && curl -fsSLO "https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" \
 && tar -xf "aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" \
 && cd aws-efa-installer && ./efa_installer.sh --disable-ngc -y --skip-kmod --skip-limit-conf --no-verify \
 && cd / && rm -rf /tmp/aws-efa-installer* /var/lib/apt/lists/* \
 && test -f /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so \
 && EFA_LIB="$(ls -d /opt/amazon/efa/lib /opt/amazon/efa/lib64 2>/dev/null | head -1)" && test -n "${EFA_LIB}" \
 && printf '%s\n' /opt/amazon/ofi-nccl/lib "${EFA_LIB}" > /etc/ld.so.conf.d/000-efa.conf && ldconfig \
 && /opt/amazon/efa/bin/fi_info --version
ENV PATH=/opt/amazon/efa/bin:${PATH} \
    LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib:/opt/amazon/efa/lib64${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}

# Checks: the profile's pins are what the image carries (no GPU at build time: imports only). The NCCL torch
# loads (as the mapped library reports itself: loaded_nccl.py) is recorded, not asserted: SGLang's image recipe replaces torch's nvidia-nccl-cu12 (2.28.3 in
# sgl-project/sglang docker/Dockerfile at 004740a9), so the profile's figure is read from this record
# (`python -m workloads.cli.runs profiles slime-0.2.4 --record-image FILE`, software/built/).
COPY loaded_nccl.py /usr/local/lib/rl-platform/loaded_nccl.py
RUN python3 - <<'PY'
import ctypes, importlib.metadata as md, os, pathlib, runpy, subprocess
def head(path):
    return subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
assert head("/root/slime") == os.environ["SLIME_COMMIT"], head("/root/slime")
assert head("/root/Megatron-LM") == os.environ["MEGATRON_COMMIT"], head("/root/Megatron-LM")
import slime, ray, torch
assert pathlib.Path(slime.__file__).resolve().is_relative_to("/root/slime"), slime.__file__
assert md.version("sglang").startswith(os.environ["EXPECT_SGLANG"]), md.version("sglang")
nccl = runpy.run_path("/usr/local/lib/rl-platform/loaded_nccl.py")["version"]()
assert ray.__version__ == os.environ["RAY_VERSION"], ray.__version__
ctypes.CDLL("libnccl-net-ofi.so")
versions = {"base_image": "slimerl/slime:" + os.environ["SLIME_IMAGE_TAG"], "slime": os.environ["SLIME_COMMIT"],
            "megatron": os.environ["MEGATRON_COMMIT"], "sglang_version": md.version("sglang"),
            "torch": torch.__version__, "torch_cuda": torch.version.cuda, "torch_nccl": nccl, "ray": ray.__version__,
            "efa_installer": os.environ["EFA_INSTALLER_VERSION"], "aws_ofi_nccl": os.environ["AWS_OFI_NCCL_VERSION"]}
pathlib.Path("/etc/rl-platform-image-versions").write_text("".join(f"{k}={v}\n" for k, v in versions.items()))
print(pathlib.Path("/etc/rl-platform-image-versions").read_text(), end="")
PY

LABEL org.opencontainers.image.title="rl-platform workload (Slime v0.2.4 on EFA)" \
      rl.platform.slime="${SLIME_COMMIT}" rl.platform.megatron="${MEGATRON_COMMIT}" \
      rl.platform.efa-installer="${EFA_INSTALLER_VERSION}" rl.platform.ray="${RAY_VERSION}"
WORKDIR /root/slime
