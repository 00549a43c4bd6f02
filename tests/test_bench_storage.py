"""An experiment's attempts on the shared file system (``bench.storage``): a finished attempt's saves are removed
at its end (the launcher, asked by ``bench run``), so seed-p5en's twelve attempts each find the room one attempt
needs; a failed one keeps them; ``estimate`` says the arithmetic; ``run`` stops after an INCOMPLETE attempt whose
saves leave the next attempt too little."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench.__main__ import main
from bench.deadlines import Overdue
from bench.experiment import load_experiment, schedule
from bench.storage import room
from workloads.checks import gate
from workloads.pod.miles_launcher import CLEAR_SAVES_ENV

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "workloads" / "pod" / "miles_launcher.py"
SEED_SHAPE = ROOT / "experiments" / "seed-p5en.yaml"

SAVES = '''
import os, sys
save = sys.argv[sys.argv.index("--save") + 1]
for it in (20, 40):
    os.makedirs(f"{save}/iter_{it:07d}", exist_ok=True)
    open(f"{save}/iter_{it:07d}/metadata.json", "w").write('{"sharded_backend": "torch_dist"}')
    os.makedirs(f"{save}/rollout", exist_ok=True)
    open(f"{save}/rollout/global_dataset_state_dict_{it - 1}.pt", "w").write("x")
open(f"{save}/latest_checkpointed_iteration.txt", "w").write("40")
if os.environ.get("FAIL"):
    raise SystemExit(1)
'''


def _launch(tmp_path: Path, **env: str) -> tuple[int, Path]:
    entry = tmp_path / "train.py"
    entry.write_text(SAVES)
    ckpt = tmp_path / "ckpt"
    done = subprocess.run([sys.executable, str(LAUNCHER), "--marker", str(ckpt / "RUNNING"), "--attempt", "2",
                           str(entry), "--save", str(ckpt), "--save-interval", "20"], capture_output=True, text=True,
                          env={**os.environ, **env})
    return done.returncode, ckpt


def test_a_finished_attempt_leaves_no_save_and_keeps_its_driver_log(tmp_path):
    code, ckpt = _launch(tmp_path, **{CLEAR_SAVES_ENV: "1"})
    assert code == 0
    assert sorted(p.name for p in ckpt.iterdir()) == ["driver-2.log"]  # the lease is released too
    assert "removed its saves (latest_checkpointed_iteration.txt, iter_0000020, iter_0000040" in \
        (ckpt / "driver-2.log").read_text()


@pytest.mark.parametrize("env", [{CLEAR_SAVES_ENV: "1", "FAIL": "1"}, {}], ids=["failed", "not-asked"])
def test_a_failed_run_or_one_not_asked_keeps_its_saves_to_resume(tmp_path, env):
    code, ckpt = _launch(tmp_path, **env)
    assert code == (1 if env else 0)
    assert {"latest_checkpointed_iteration.txt", "iter_0000020", "iter_0000040", "rollout"} <= \
        {p.name for p in ckpt.iterdir()}


def test_every_attempt_bench_runs_asks_the_launcher_to_remove_its_saves(capsys):
    assert main(["run", str(SEED_SHAPE), "--dry-run"]) == 0
    jobs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert len(jobs) == len(schedule(load_experiment(SEED_SHAPE))) == 12
    for job in jobs:
        assert yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"][CLEAR_SAVES_ENV] == "1"


def test_estimate_says_what_an_attempt_needs_and_what_an_incomplete_one_leaves(capsys):
    """seed-p5en on p5en-seed: 21,600 GiB is 20,874 GB usable; an attempt peaks at 20,812 GB (two 9,394 GB saves,
    the FP8 model, its BF16 copy, the data); with each finished attempt's saves removed, all twelve fit."""
    assert main(["estimate", str(SEED_SHAPE)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ("workloads.storage.capacityGib 21,600 GiB, 20,874 GB usable): an attempt's peak is 20,812 GB; each "
            "finished attempt's saves are removed at its end") in text
    assert "(usable 20,874 - peak 20,812) / 18,788 GB = 0, so bench run stops after an INCOMPLETE attempt" in text


def test_run_stops_after_an_incomplete_attempt_whose_saves_leave_the_next_too_little(monkeypatch):
    import bench.runner as runner
    exp = load_experiment(SEED_SHAPE)
    cfg = gate.read(exp.stack)
    attempts = schedule(exp)
    ran = []

    def attempt(api, cfg, exp, a, *args):
        ran.append(a.folder)
        raise Overdue(f"{a.folder}: no step within its deadline")
    monkeypatch.setattr(runner, "run_attempt", attempt)
    missed = runner._run_all(None, cfg, exp, attempts, Path("out"), "", lambda _: None, 0, None, None, None,
                             room(exp, cfg))
    assert ran == [attempts[0].folder]
    assert list(missed) == [a.folder for a in attempts]
    assert "would not fit beside them in 20,874 GB usable" in missed[attempts[1].folder]
    seed_ab = load_experiment(ROOT / "experiments" / "seed-ab.yaml")
    ran.clear()
    runner._run_all(None, gate.read(seed_ab.stack), seed_ab, schedule(seed_ab), Path("out"), "", lambda _: None, 0,
                    None, None, None, room(seed_ab, gate.read(seed_ab.stack)))
    assert len(ran) == 5  # 4 INCOMPLETE attempts' saves fit beside the next one's peak, not 5


def test_estimate_says_how_long_a_save_takes_and_the_deadline_of_a_step_that_saves(capsys):
    """seed-p5en: 9,394 GB a save on p5en-seed's 21,600 GiB at 250 MB/s per TiB (5,273 MB/s) is 29.7 min; a step
    that saves may take 3 x (180 s + that) before bench run calls the attempt INCOMPLETE."""
    assert main(["estimate", str(SEED_SHAPE)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ("a save of 9,394 GB at 5,273 MB/s (capacityGib 21,600 = 21.09 TiB x throughputPerTib 250 MB/s) takes "
            "29.7 min") in text
    assert "next step 540 s, after a step that saves (the log's steps 19, 39, 44) 98 min" in text
