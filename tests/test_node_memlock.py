"""Every EFA pool's nodes run containerd with an unlimited memlock, checked on the user data of the
launch templates each stack registers; the script itself runs against a fake root."""

from __future__ import annotations

import base64
import email
import os
import shutil
import subprocess
from pathlib import Path

from conftest import STACKS, graph_of, load

from components.node_pool import CONTAINERD_MEMLOCK_DROPIN, memlock_script

LT = "aws:ec2/launchTemplate:LaunchTemplate"


def parts_of(user_data: str) -> list[tuple[str, str]]:
    msg = email.message_from_string(base64.b64decode(user_data).decode())
    assert msg.is_multipart()
    return [(p.get_content_type(), p.get_payload()) for p in msg.get_payload()]


def test_every_efa_pool_raises_containerds_memlock_and_no_other_pool_does():
    efa_pools = 0
    for stack in STACKS:
        cfg, graph = load(stack), graph_of(stack)
        for pool in cfg.pools:
            lt = graph.named(LT, f"{cfg.cluster_name}-{pool.name}")
            parts = parts_of(lt.inputs["userData"])
            assert parts[0][0] == "application/node.eks.aws", (stack, pool.name)
            memlock = [b for t, b in parts if t == "text/x-shellscript" and CONTAINERD_MEMLOCK_DROPIN in b]
            if pool.efa_enabled:
                efa_pools += 1
                assert memlock == [memlock_script()], (stack, pool.name)
            else:
                assert memlock == [], (stack, pool.name)
    assert efa_pools >= 2 * len([s for s in STACKS if any(p.efa_enabled for p in load(s).pools)])


def test_script_writes_the_drop_in_and_reloads_systemd(tmp_path):
    root, bin_dir = tmp_path / "root", tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    stub = bin_dir / "systemctl"
    stub.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    stub.chmod(0o755)
    script = tmp_path / "memlock.sh"
    script.write_text(memlock_script().replace("/etc/", f"{root}/etc/"))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run([shutil.which("sh"), str(script)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    dropin = Path(f"{root}{CONTAINERD_MEMLOCK_DROPIN}")
    assert dropin.read_text() == "[Service]\nLimitMEMLOCK=infinity\n"
    assert calls.read_text() == "daemon-reload\n"
