"""Runs that survive and never lie (issue 11): last.ckpt holds the latest state; a run killed with SIGKILL
resumes in its own directory and continues exactly as if uninterrupted; SIGTERM checkpoints and exits
non-zero; starting points are checked (vocabulary, stage, a missing MLE start, a reused folder)."""
import csv
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from trainer.checkpoints import AtomicCheckpointIO, CheckpointError, LatestCheckpoint
from trainer.train import SettingsError, run

from test_train import ROOT, TINY, compose_run, global_step

TIMEOUT = 600


def losses(run_dir: Path) -> dict[int, float]:
    """train/loss by optimizer step, over every CSV log of the run (a resume adds a version)."""
    by_step = {}
    for path in sorted((run_dir / "logs").glob("version_*/metrics.csv")):
        for row in csv.DictReader(path.open()):
            if row.get("train/loss"):
                by_step[int(row["step"])] = float(row["train/loss"])
    return by_step


def train_command(run_dir: Path, overrides: list[str]) -> list[str]:
    return [sys.executable, "-m", "trainer.train", f"hydra.run.dir={run_dir}", f"cache_dir={run_dir.parent / 'cache'}",
            "run_name=run", *TINY, *overrides]


def wait_for_checkpoint(process: subprocess.Popen, path: Path, step: int) -> None:
    deadline = time.time() + TIMEOUT
    while time.time() < deadline and process.poll() is None:
        if path.exists():
            try:
                if global_step(path) >= step:
                    return
            except Exception:  # being written
                pass
        time.sleep(0.2)
    raise AssertionError(f"no checkpoint at step {step} (rc {process.poll()})")


@pytest.fixture(scope="module")
def mle_best(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("mle")
    run(compose_run(tmp, "mle", ["reward=mle", "trainer.max_steps=20", "test=false"]))
    return tmp / "mle" / "checkpoints" / "best.ckpt"


MIXED = ["reward=rouge_l", "trainer.max_steps=16", "trainer.val_check_interval=5", "checkpoint_every=3", "test=false",
         "threads=1", "stages.mixed.lr=1e-3"]


@pytest.mark.slow
def test_sigkilled_mixed_run_resumes_exactly(mle_best, tmp_path):
    reference = tmp_path / "uninterrupted"
    run(compose_run(tmp_path, "uninterrupted", [*MIXED, f"mle_checkpoint={mle_best}"]))
    expected = losses(reference)
    assert sorted(expected) == list(range(16))

    killed = tmp_path / "killed"
    process = subprocess.Popen(train_command(killed, [*MIXED, f"mle_checkpoint={mle_best}"]), cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last = killed / "checkpoints" / "last.ckpt"
    wait_for_checkpoint(process, last, 3)
    process.send_signal(signal.SIGKILL)
    process.wait()
    start = global_step(last)
    assert 3 <= start <= 11, "killed too late to compare 5 resumed steps"

    resumed = run(compose_run(tmp_path, "killed", [*MIXED, f"ckpt_path={last}", f"mle_checkpoint={mle_best}"]))
    assert resumed == {}
    got = losses(killed)
    assert global_step(last) == 16
    for step in range(start, start + 5):  # the steps after the checkpoint, replayed by the resumed run
        assert got[step] == pytest.approx(expected[step], abs=1e-5), step


@pytest.mark.slow
def test_sigterm_checkpoints_and_exits_non_zero(tmp_path):
    run_dir = tmp_path / "term"
    process = subprocess.Popen(train_command(run_dir, ["reward=mle", "trainer.max_steps=100000", "checkpoint_every=2",
                                                       "threads=1"]), cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    last = run_dir / "checkpoints" / "last.ckpt"
    wait_for_checkpoint(process, last, 2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=TIMEOUT)
    assert process.returncode == 143, stderr[-2000:]
    assert "resume with ckpt_path=" in stderr
    assert global_step(last) >= 2 and not (run_dir / "results.json").exists()


@pytest.mark.slow
def test_last_checkpoint_follows_every_validation_without_improvement(tmp_path, monkeypatch):
    # lr 0: the first validation is the best one; last.ckpt must still follow each later validation (it
    # stayed at the best one's step: a kill lost every step since). No end-of-fit save: as if killed at 17.
    monkeypatch.setattr(LatestCheckpoint, "on_train_end", lambda *args: None)
    run(compose_run(tmp_path, "flat", ["reward=mle", "stages.mle.lr=0", "trainer.max_steps=17",
                                       "trainer.val_check_interval=5", "checkpoint_every=1000", "test=false"]))
    checkpoints = tmp_path / "flat" / "checkpoints"
    assert global_step(checkpoints / "best.ckpt") == 5 and global_step(checkpoints / "last.ckpt") == 15
    saved = torch.load(checkpoints / "last.ckpt", map_location="cpu", weights_only=True)
    best_state = next(v for k, v in saved["callbacks"].items() if k.startswith("ModelCheckpoint"))
    assert best_state["best_model_path"].endswith("best.ckpt")
    assert sorted(p.name for p in checkpoints.iterdir()) == ["best.ckpt", "last.ckpt"]


@pytest.mark.slow
def test_resume_keeps_the_best_score_and_the_run_directory(tmp_path):
    run(compose_run(tmp_path, "mle", ["reward=mle", "trainer.max_steps=10", "trainer.val_check_interval=5",
                                      "test=false"]))
    checkpoints = tmp_path / "mle" / "checkpoints"
    best_before = torch.load(checkpoints / "best.ckpt", map_location="cpu", weights_only=True)
    # lr 0 after the resume: no later validation beats the old best, so best.ckpt must stay as it was.
    with pytest.raises(SettingsError, match="stages.mle.lr|optimizer.lr"):
        run(compose_run(tmp_path, "mle", ["reward=mle", "trainer.max_steps=20", "stages.mle.lr=0",
                                          f"ckpt_path={checkpoints / 'last.ckpt'}"]))
    run(compose_run(tmp_path, "mle", ["reward=mle", "trainer.max_steps=15", "trainer.val_check_interval=5",
                                      "test=false", f"ckpt_path={checkpoints / 'last.ckpt'}"]))
    assert global_step(checkpoints / "last.ckpt") == 15
    best_after = torch.load(checkpoints / "best.ckpt", map_location="cpu", weights_only=True)
    assert best_after["global_step"] in (best_before["global_step"], 15)
    scores = [next(v for k, v in c["callbacks"].items() if k.startswith("ModelCheckpoint"))["best_model_score"]
              for c in (best_before, best_after)]
    assert scores[1] <= scores[0]  # val/loss: the best never gets worse across a resume


def test_a_folder_that_holds_a_run_is_refused(tmp_path):
    (tmp_path / "mle").mkdir()
    (tmp_path / "mle" / "config.yaml").write_text("seed: 1\n")
    with pytest.raises(SettingsError, match="already holds a run"):
        run(compose_run(tmp_path, "mle", ["reward=mle"]))


def test_mixed_run_without_an_mle_start_is_refused(tmp_path):
    with pytest.raises(SettingsError, match="mle_checkpoint="):
        run(compose_run(tmp_path, "sms", ["reward=rouge_l"]))


@pytest.mark.slow
def test_explicit_random_start_trains(tmp_path):
    run(compose_run(tmp_path, "random", ["reward=rouge_l", "init_from=none", "trainer.max_steps=1", "test=false",
                                         "validate_at_start=false"]))
    assert global_step(tmp_path / "random" / "checkpoints" / "last.ckpt") == 1


@pytest.mark.slow
def test_checkpoint_on_another_vocabulary_is_refused(mle_best, tmp_path):
    with pytest.raises(CheckpointError, match="another vocabulary"):
        run(compose_run(tmp_path, "other", ["reward=rouge_l", f"mle_checkpoint={mle_best}", "data.max_source_len=15"]))


@pytest.mark.slow
def test_mle_checkpoint_as_ckpt_path_of_a_mixed_run_is_refused(mle_best):
    run_dir = mle_best.parents[1]
    with pytest.raises(CheckpointError, match=f"mle_checkpoint={mle_best}"):
        run(compose_run(run_dir.parent, run_dir.name, ["reward=rouge_l", f"ckpt_path={mle_best}"]))


def test_checkpoint_writes_are_atomic(tmp_path):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1}, path)
    with pytest.raises(Exception):
        io.save_checkpoint({"step": 2, "bad": lambda: None}, path)  # fails mid-write (cannot pickle)
    assert torch.load(path, weights_only=True) == {"step": 1}
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == ["last.ckpt"]


def test_unreadable_checkpoint_is_named(tmp_path):
    path = tmp_path / "cut.ckpt"
    path.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(CheckpointError, match="cut.ckpt cannot be read"):
        run(compose_run(tmp_path, "sms", ["reward=rouge_l", f"mle_checkpoint={path}"]))


def test_slurm_cluster_config_composes_one_job_per_point():
    from hydra import compose, initialize_config_dir
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("train", overrides=["+cluster=slurm", "experiment=cnndm_sample_grid", "reward=rouge_l",
                                          "hydra.launcher.nodes=2", "hydra.launcher.gpus_per_node=4"],
                      return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher") and launcher.max_num_timeout > 0
    assert launcher.tasks_per_node == 4 and cfg.resume_if_exists


@pytest.mark.slow
def test_a_requeued_run_resumes_from_its_last_checkpoint(tmp_path):
    run(compose_run(tmp_path, "job", ["reward=mle", "trainer.max_steps=3", "test=false"]))
    run(compose_run(tmp_path, "job", ["reward=mle", "trainer.max_steps=6", "test=false", "resume_if_exists=true"]))
    assert global_step(tmp_path / "job" / "checkpoints" / "last.ckpt") == 6
    assert sorted(losses(tmp_path / "job")) == list(range(6))


@pytest.mark.slow
def test_sigusr1_checkpoints_and_training_goes_on(tmp_path):
    run_dir = tmp_path / "usr1"
    # No validation and no periodic checkpoint: only the signal can write last.ckpt.
    process = subprocess.Popen(train_command(run_dir, ["reward=mle", "trainer.max_steps=100000", "threads=1",
                                                       "checkpoint_every=100000", "+trainer.limit_val_batches=0"]),
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + TIMEOUT
        while not (run_dir / "config.yaml").exists() and time.time() < deadline and process.poll() is None:
            time.sleep(0.2)
        time.sleep(5)  # fit has begun (config.yaml is written just before it)
        assert not (run_dir / "checkpoints" / "last.ckpt").exists()
        process.send_signal(signal.SIGUSR1)
        last = run_dir / "checkpoints" / "last.ckpt"
        wait_for_checkpoint(process, last, 1)
        assert process.poll() is None  # still training
    finally:
        process.kill()
        process.wait()


@pytest.mark.slow
def test_submitit_local_launcher_runs_a_sweep_point_per_job(tmp_path):
    # The SLURM launcher's local twin (same plugin, jobs as local processes): what this machine can run.
    sweep = tmp_path / "sweep"
    done = subprocess.run([sys.executable, "-m", "trainer.train", "-m", "hydra/launcher=submitit_local",
                           f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=${hydra.job.num}",
                           "hydra.launcher.timeout_min=10", "reward=mle",
                           "trainer.max_steps=2,3", "test=false", f"cache_dir={tmp_path / 'cache'}", *TINY],
                          cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = sorted(global_step(p) for p in sweep.glob("*/checkpoints/last.ckpt"))
    jobs = [d for d in (sweep / ".submitit").iterdir() if d.name.isdigit()]  # one submitit job per point
    assert steps == [2, 3] and len(jobs) == 2


def test_first_difference_names_the_changed_setting_and_ignores_settings_added_since():
    from trainer.train import first_difference
    saved = {"optimizer": {"lr": 1e-5}, "data": {"name": "demo"}}
    assert first_difference(saved, {"optimizer": {"lr": 1e-3}, "data": {"name": "demo"}}) == ("optimizer.lr", 1e-5, 1e-3)
    assert first_difference(saved, {"optimizer": {"lr": 1e-5}, "data": {"name": "demo", "shuffle_seed": 0}}) is None
