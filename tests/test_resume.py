"""Runs that survive and never lie (issues 11, 21): last.ckpt holds the latest state; a run killed with SIGKILL
resumes in its own directory and continues exactly as if uninterrupted, also after its folder was moved or copied;
SIGTERM in any stage checkpoints what there is and exits 143; starting points and settings are checked before any
work (vocabulary, stage, a missing MLE start, a reused folder), and refused runs leave others' records alone."""
import csv
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from trainer.checkpoints import AtomicCheckpointIO, BestCheckpoint, CheckpointError, LatestCheckpoint
from trainer.module import SummarizationModule
from trainer.folders import ATTEMPT, RunFolders
from evaluation.runs import EvaluationRefused
from trainer.settings import SettingsError, check_settings
from trainer.run import run

from test_scripts import load_script
from test_train import ROOT, TINY, compose_run, freeze_weights, global_step

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
    step = global_step(last)
    assert step >= 2 and not (run_dir / "results.json").exists()
    # the folder alone resumes, with the settings the run was started with (its TINY data, model and cache)
    resume = [sys.executable, "-m", "trainer.train", f"ckpt_path={run_dir}"]
    changed = subprocess.run([*resume, "data.train.n=200", "stages.mle.lr=1e-3"], cwd=ROOT, capture_output=True,
                             text=True, timeout=TIMEOUT)
    assert changed.returncode == 1 and changed.stderr.strip().splitlines()[-1] == (
        "SettingsError: ckpt_path: the run was started with data.train.n=300 (this resume: 200); module.optimizer.lr="
        "0.003 (this resume: 0.001); optimizer.lr=0.003 (this resume: 0.001): resume with the run's own settings "
        "(ckpt_path=<its folder> alone resumes with them)")
    resumed = subprocess.run([*resume, f"trainer.max_steps={step + 2}", "test=false"], cwd=ROOT, capture_output=True,
                             text=True, timeout=TIMEOUT)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resuming {run_dir} with the settings it was started with: " in resumed.stderr
    assert global_step(last) == step + 2


@pytest.mark.slow
def test_last_checkpoint_follows_every_validation_without_improvement(tmp_path, monkeypatch):
    # Weights that never move: the first validation is the best one; last.ckpt must still follow each later validation
    # (it stayed at the best one's step: a kill lost every step since). No end-of-fit save: as if killed at 17.
    monkeypatch.setattr(LatestCheckpoint, "on_train_end", lambda *args: None)
    freeze_weights(monkeypatch)
    run(compose_run(tmp_path, "flat", ["reward=mle", "trainer.max_steps=17",
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
    changed = (r"started with module\.optimizer\.lr=0\.003 \(this resume: 0\.0001\); optimizer\.lr=0\.003 \(this "
               r"resume: 0\.0001\); trainer\.val_check_interval=5")  # every setting it changes, named
    with pytest.raises(SettingsError, match=changed):
        run(compose_run(tmp_path, "mle", ["reward=mle", "trainer.max_steps=20", "stages.mle.lr=1e-4",
                                          f"ckpt_path={checkpoints / 'last.ckpt'}"]))
    with pytest.raises(SettingsError, match=r"started with trainer\.accumulate_grad_batches=1 \(this resume: 2\):"):
        run(compose_run(tmp_path, "mle", ["reward=mle", "trainer.max_steps=15", "trainer.val_check_interval=5",
                                          "+trainer.accumulate_grad_batches=2",
                                          f"ckpt_path={checkpoints / 'last.ckpt'}"]))
    with pytest.raises(SettingsError, match=r"started with trainer\.gradient_clip_val=2\.0 \(this resume: 1\.0\):"):
        run(compose_run(tmp_path, "mle", ["reward=mle", "trainer.max_steps=15", "trainer.val_check_interval=5",
                                          "trainer.gradient_clip_val=1.0", f"ckpt_path={checkpoints / 'last.ckpt'}"]))
    run(compose_run(tmp_path, "mle", ["reward=mle", "trainer.max_steps=15", "trainer.val_check_interval=5",
                                      "test=false", f"ckpt_path={checkpoints / 'last.ckpt'}"]))
    assert global_step(checkpoints / "last.ckpt") == 15
    best_after = torch.load(checkpoints / "best.ckpt", map_location="cpu", weights_only=True)
    assert best_after["global_step"] in (best_before["global_step"], 15)
    scores = [next(v for k, v in c["callbacks"].items() if k.startswith("ModelCheckpoint"))["best_model_score"]
              for c in (best_before, best_after)]
    assert scores[1] <= scores[0]  # val/loss: the best never gets worse across a resume


def test_a_folder_that_holds_a_run_is_refused(tmp_path):
    (tmp_path / "mle" / "checkpoints").mkdir(parents=True)
    (tmp_path / "mle" / "checkpoints" / "last.ckpt").write_bytes(b"")
    with pytest.raises(SettingsError, match="already holds a run.*resume it with ckpt_path="):
        run(compose_run(tmp_path, "mle", ["reward=mle"]))


@pytest.mark.parametrize("requeued", [False, True])
def test_a_folder_without_a_checkpoint_holds_no_run_and_is_reused(tmp_path, requeued):
    # what a run stopped before its first checkpoint leaves (Ctrl-C in the start validation): its config only
    (tmp_path / "mle").mkdir()
    (tmp_path / "mle" / "config.yaml").write_text("seed: 1\n")
    run(compose_run(tmp_path, "mle", ["reward=mle", "trainer.max_steps=1", "test=false",
                                      f"resume_if_exists={requeued}"]))
    assert global_step(tmp_path / "mle" / "checkpoints" / "last.ckpt") == 1
    assert OmegaConf.load(tmp_path / "mle" / "config.yaml").seed == 0


def test_a_run_that_fails_before_its_first_step_can_start_again_with_a_corrected_setting(tmp_path, monkeypatch):
    def refuse(self):
        raise ValueError("a setting the optimizer refuses")
    with monkeypatch.context() as patch:
        patch.setattr(SummarizationModule, "configure_optimizers", refuse)
        with pytest.raises(ValueError, match="the optimizer refuses"):
            run(compose_run(tmp_path, "mle", ["reward=mle", "trainer.max_steps=1", "test=false"]))
    assert not (tmp_path / "mle" / "checkpoints" / "last.ckpt").exists()  # nothing was trained: nothing to resume
    run(compose_run(tmp_path, "mle", ["reward=mle", "trainer.max_steps=1", "test=false", "stages.mle.lr=1e-3"]))
    assert global_step(tmp_path / "mle" / "checkpoints" / "last.ckpt") == 1


def test_settings_that_cannot_work_are_refused_before_any_work(tmp_path, monkeypatch):
    def built(cfg):
        raise AssertionError("the data and model were built before the settings were checked")
    monkeypatch.setattr("trainer.run.build", built)
    refused = {"stages.mle.lr=-1": r"optimizer.lr=-1 \(stages.mle.lr\): a learning rate cannot be negative",
               "trainer.max_steps=0": "trainer.max_steps=0 trains nothing",
               "seed=foo": "seed='foo': give a whole number",  # Lightning's int() failed after the run folder existed
               "threads=0": "threads=0: give 1 or more",  # ran at PyTorch's default
               # MLE trains from stages.mle.init_from: an mle_checkpoint it would ignore is named, not dropped
               f"mle_checkpoint={tmp_path / 'other' / 'checkpoints' / 'best.ckpt'}": "set stages.mle.init_from=.*other"}
    if not torch.cuda.is_available():  # Lightning's own refusal came after the data was built
        refused["trainer=gpu"] = r"trainer.accelerator=gpu \(trainer=gpu\) needs a CUDA GPU"
    for override, message in refused.items():
        with pytest.raises(SettingsError, match=message):
            run(compose_run(tmp_path, "mle", ["reward=mle", override]))
    assert not (tmp_path / "mle").exists()


@pytest.mark.parametrize("override, message", [("data.batch_size=0", r"^data.batch_size must be at least 1, got 0$"),
                                               ("trainer.precision=bogus", r"^Precision 'bogus' is invalid")])
def test_a_setting_the_data_or_lightning_refuses_is_its_own_one_line_error(tmp_path, override, message):
    from rewards.configs import ConfigRefused
    with pytest.raises(ConfigRefused, match=message):  # not Hydra's wrapper around it
        run(compose_run(tmp_path, "mle", ["reward=mle", override]))


@pytest.mark.parametrize("overrides, message", [
    (["reward=rouge_l", "stages.mixed.lr=0"], r"optimizer\.lr=0 \(stages\.mixed\.lr\) trains nothing"),
    (["reward=rouge_l", "trainer.val_check_interval=5"],
     r"trainer\.val_check_interval=5 is more than trainer\.max_steps=4 .*would never validate after its start"),
    (["reward=rouge_l_sms", "reward.weights.rouge_l=0", "reward.weights.sms=0"],
     r"reward\.weights are all 0 \(rouge_l, sms\)"),
])
def test_a_mixed_run_that_would_never_train_is_refused_before_any_work(tmp_path, monkeypatch, overrides, message):
    # each ran, exited 0 and was tabulated as a trained run (Δ +0.0000 the only hint)
    def built(cfg):
        raise AssertionError("the data and model were built before the settings were checked")
    monkeypatch.setattr("trainer.run.build", built)
    start = f"mle_checkpoint={tmp_path / 'mle' / 'checkpoints' / 'best.ckpt'}"
    with pytest.raises(SettingsError, match=message):
        run(compose_run(tmp_path, "mixed", [start, "trainer.max_steps=4", "trainer.val_check_interval=2", *overrides]))


def composed_with_hydra(overrides: list[str], monkeypatch) -> DictConfig:
    """The config of a start from the command line with `overrides`, Hydra's part included and set as Hydra sets it
    (until the test ends)."""
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)
    HydraConfig.instance().set_config(cfg)
    return cfg


def test_a_grid_experiment_run_alone_is_not_refused_over_an_mle_checkpoint_the_user_never_set(tmp_path, monkeypatch):
    # demo_grid's mle_checkpoint is its sweep's MLE point: without -m its MLE run was refused for not using it
    check_settings(composed_with_hydra(["experiment=demo_grid", "reward=mle", f"output_dir={tmp_path}"], monkeypatch))
    other = tmp_path / "other" / "checkpoints" / "best.ckpt"
    with pytest.raises(SettingsError, match=f"mle_checkpoint={other} is not used"):  # given: still named
        check_settings(composed_with_hydra(["experiment=demo_grid", "reward=mle", f"output_dir={tmp_path}",
                                            f"mle_checkpoint={other}"], monkeypatch))


def test_an_experiments_mandatory_setting_left_unset_is_named_before_work(tmp_path, monkeypatch):
    # scialom_table2_sample's mle_checkpoint reads news_grid (???): unset, the run ended in OmegaConf's traceback
    overrides = ["experiment=scialom_table2_sample", "reward=rouge_l", f"output_dir={tmp_path}"]
    with pytest.raises(SettingsError, match=r"^news_grid is not set: give news_grid=<value>"):
        check_settings(composed_with_hydra(overrides, monkeypatch))
    check_settings(composed_with_hydra([*overrides, f"news_grid={tmp_path}"], monkeypatch))


def test_the_run_folder_check_reads_the_folders_name_and_refuses_an_unwritable_one(tmp_path, monkeypatch):
    # The folder's name reads the reward (${hydra:runtime.choices.reward}) before Hydra sets its config: every start
    # into the default folder, every resume too, warned "HydraConfig was not set" and skipped the check.
    monkeypatch.chdir(tmp_path)
    cfg = composed_with_hydra(["reward=mle"], monkeypatch)
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)  # as Hydra calls the callback
    RunFolders().on_run_start(cfg)
    assert [p.name for p in (tmp_path / "runs" / "demo").iterdir()] == [f"{ATTEMPT}_mle"]

    def read_only(*args, **kwargs):  # a read-only folder (root, here, can write anywhere)
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr("tempfile.TemporaryFile", read_only)
    cfg = composed_with_hydra(["reward=mle", f"ckpt_path={tmp_path / 'run' / 'checkpoints' / 'last.ckpt'}"],
                              monkeypatch)
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)
    with pytest.raises(SystemExit, match=f"hydra.run.dir: cannot write to {tmp_path / 'run'} \\(Permission denied"):
        RunFolders().on_run_start(cfg)


def test_a_sweep_axis_that_its_folders_do_not_name_is_refused_before_any_point(tmp_path, monkeypatch):
    # demo_grid's points are seed_<seed>/<run_name>: a learning-rate axis put two points in one folder, the second
    # refused only after the first had trained
    cfg = composed_with_hydra(["experiment=demo_grid", f"hydra.sweep.dir={tmp_path / 'sweep'}"], monkeypatch)
    OmegaConf.set_readonly(cfg.hydra, False)
    cfg.hydra.overrides.task = ["experiment=demo_grid", "reward=mle,rouge_l", "stages.mixed.lr=1e-4,3e-4"]
    with pytest.raises(SystemExit, match=r"the sweep varies stages\.mixed\.lr, which hydra\.sweep\.subdir=seed_\$\{seed\}/"
                                         r"\$\{run_name\} does not name: its points would share one folder"):
        RunFolders().on_multirun_start(cfg)
    assert not (tmp_path / "sweep").exists()
    cfg.hydra.overrides.task = ["experiment=demo_grid", "reward=mle,rouge_l", "seed=0,1", "threads=1"]
    RunFolders().on_multirun_start(cfg)  # every point its own folder
    # an override whose value reads Hydra's config (the length-neutral rows' run names) was resolved here, before
    # Hydra sets it: the callback warned "HydraConfig was not set" and the sweep ran unchecked and unlocked
    cfg.hydra.overrides.task = ["experiment=demo_grid", "reward=sms,s_wms",
                                "run_name=${hydra:runtime.choices.reward}_neutral", "stages.mixed.lr=1e-4,3e-4"]
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)
    with pytest.raises(SystemExit, match=r"the sweep varies stages\.mixed\.lr"):
        RunFolders().on_multirun_start(cfg)


def test_a_second_sweep_into_a_folder_whose_sweep_still_runs_is_refused_before_it_writes(tmp_path, monkeypatch):
    # before: refused point by point (each run folder's lock), after Hydra had rewritten the first's multirun.yaml
    cfg = composed_with_hydra(["experiment=demo_grid", f"hydra.sweep.dir={tmp_path / 'sweep'}"], monkeypatch)
    OmegaConf.set_readonly(cfg.hydra, False)
    cfg.hydra.overrides.task = ["experiment=demo_grid", "reward=mle,rouge_l"]
    (tmp_path / "sweep").mkdir()
    first = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
                              "fcntl.flock(f, fcntl.LOCK_EX); print(flush=True); time.sleep(60)",
                              str(tmp_path / "sweep" / ".sweep.lock")], stdout=subprocess.PIPE, text=True)
    first.stdout.readline()  # the first sweep's process holds the lock
    (tmp_path / "sweep" / "multirun.yaml").write_text("the first sweep's\n")
    with pytest.raises(SystemExit, match=f"hydra.sweep.dir {tmp_path / 'sweep'} is in use by a sweep still running"):
        RunFolders().on_multirun_start(cfg)
    assert (tmp_path / "sweep" / "multirun.yaml").read_text() == "the first sweep's\n"
    first.kill()  # the first sweep has ended
    first.wait()
    RunFolders().on_multirun_start(cfg)
    import pickle
    pickle.dumps(RunFolders())  # Hydra's launchers send the callbacks to their jobs


def test_mle_continues_from_mle_checkpoint_when_asked_and_a_grid_names_its_own(tmp_path):
    other = tmp_path / "other" / "checkpoints" / "best.ckpt"
    check_settings(compose_run(tmp_path, "mle", ["reward=mle", f"mle_checkpoint={other}",
                                                 f"stages.mle.init_from={other}"]))
    # a grid's mle_checkpoint is its MLE point's own best checkpoint: the run that writes it
    check_settings(compose_run(tmp_path, "mle", ["reward=mle", f"mle_checkpoint={tmp_path}/mle/checkpoints/best.ckpt"]))


def test_a_checkpoint_that_cannot_be_written_is_named(tmp_path, monkeypatch):
    def unwritable(obj, f, *args, **kwargs):  # what torch says for a read-only folder (root, here, can write anywhere)
        raise RuntimeError(f"File {f} cannot be opened.")
    monkeypatch.setattr(torch, "save", unwritable)
    path = tmp_path / "checkpoints" / "last.ckpt"
    with pytest.raises(CheckpointError, match=f"cannot write checkpoint {path}: .*is {path.parent} writable"):
        AtomicCheckpointIO().save_checkpoint({"step": 1}, path)


def test_a_run_folder_that_cannot_be_written_is_refused_before_hydra_writes(tmp_path, monkeypatch):
    def read_only(*args, **kwargs):  # a read-only folder (root, here, can write anywhere)
        raise PermissionError(13, "Permission denied")
    config = composed_with_hydra(["reward=mle", f"hydra.run.dir={tmp_path / 'run'}"], monkeypatch)
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)  # as Hydra calls the callback
    monkeypatch.setattr("tempfile.TemporaryFile", read_only)
    with pytest.raises(SystemExit, match=f"hydra.run.dir: cannot write to {tmp_path / 'run'} \\(Permission denied"):
        RunFolders().on_run_start(config)


def test_a_text_file_as_a_checkpoint_is_named(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("best run: runs/demo/x\n")
    with pytest.raises(CheckpointError, match=f"^checkpoint {notes} is not a checkpoint file"):
        run(compose_run(tmp_path, "sms", ["reward=rouge_l", f"mle_checkpoint={notes}"]))


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
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # and no partial file left beside it


def test_a_full_disk_is_named_and_leaves_no_partial_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "best.ckpt"
    AtomicCheckpointIO().save_checkpoint({"step": 1}, path)

    def full(obj, f, *args, **kwargs):
        Path(f).write_bytes(b"PK half")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(CheckpointError, match=r"best.ckpt: .*No space left on device \(the disk holding .* is full: "):
        AtomicCheckpointIO().save_checkpoint({"step": 2}, path)
    assert [p.name for p in tmp_path.iterdir()] == ["best.ckpt"]

    def zip_writer_full(obj, f, *args, **kwargs):  # torch's zip writer on a full disk (a 2 MB tmpfs): no errno
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1988608 vs 1988496")
    monkeypatch.setattr(torch, "save", zip_writer_full)
    free = {"bytes": 1 << 20}
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: shutil._ntuple_diskusage(1 << 30, 0, free["bytes"]))
    with pytest.raises(CheckpointError, match=r"unexpected pos .* \(the disk holding .* is full: 1,024 KiB free, the "
                                              r"checkpoint needs about 1 MiB\)"):
        AtomicCheckpointIO().save_checkpoint({"step": 2, "weights": torch.zeros(1 << 18)}, path)
    free["bytes"] = 1 << 30  # room enough: not full
    with pytest.raises(CheckpointError, match=r"unexpected pos .* \(is .* writable\?\)"):
        AtomicCheckpointIO().save_checkpoint({"step": 2, "weights": torch.zeros(1 << 18)}, path)


def test_a_full_disk_at_the_end_of_fit_costs_the_curve_files_not_the_run(tmp_path, monkeypatch, caplog):
    from trainer import callbacks

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(callbacks, "plot_curves", full)
    curve = callbacks.ValidationCurve("val/loss", "min", str(tmp_path))
    curve.points = [{"step": 0, "seconds": 0.0, "val/loss": 2.0}, {"step": 5, "seconds": 1.0, "val/loss": 1.0}]
    curve.on_fit_end(type("T", (), {"is_global_zero": True})(), None)
    assert "could not write the validation curve's files" in caplog.text and "No space left" in caplog.text


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


def test_a_continued_sweeps_ended_run_keeps_its_results_and_one_given_more_steps_trains_and_tests_again(tmp_path,
                                                                                                       capsys):
    ended = ["reward=mle", "trainer.max_steps=10", "resume_if_exists=true"]
    first = run(compose_run(tmp_path, "job", ended))
    results = tmp_path / "job" / "results.json"
    tested = results.stat().st_mtime_ns
    capsys.readouterr()
    assert run(compose_run(tmp_path, "job", ended)) == first
    assert results.stat().st_mtime_ns == tested  # not tested again
    assert "job (beam)" in capsys.readouterr().out  # its table, as a test prints it
    run(compose_run(tmp_path, "job", ["reward=mle", "trainer.max_steps=20", "resume_if_exists=true"]))
    assert global_step(tmp_path / "job" / "checkpoints" / "last.ckpt") == 20
    assert results.stat().st_mtime_ns != tested


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


def test_differences_name_each_changed_setting_and_ignore_settings_added_since():
    from trainer.settings import differences
    saved = {"optimizer": {"lr": 1e-5}, "data": {"name": "demo", "n": 3}}
    assert differences(saved, {"optimizer": {"lr": 1e-3}, "data": {"name": "demo", "n": 4}}) == [
        ("data.n", 3, 4), ("optimizer.lr", 1e-5, 1e-3)]
    assert differences(saved, {"optimizer": {"lr": 1e-5}, "data": {"name": "demo", "n": 3, "shuffle_seed": 0}}) == []


def test_a_resume_from_the_folder_alone_gets_the_settings_the_run_was_started_with(tmp_path, capsys):
    from trainer.folders import with_saved_settings
    run_dir = tmp_path / "run"
    last = f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}"
    (run_dir / "checkpoints").mkdir(parents=True)
    assert with_saved_settings([f"ckpt_path={run_dir}"]) == [last]  # a run from before the record: as given
    (run_dir / "overrides.yaml").write_text("- reward=rouge_l\n- data.train.n=400\n- seed=3\n"
                                            "- +reward@metrics.r1=rouge_1\n")
    assert with_saved_settings([f"ckpt_path={run_dir}", "trainer.max_steps=50", "seed=4"]) == [
        "reward=rouge_l", "data.train.n=400", "+reward@metrics.r1=rouge_1", last, "trainer.max_steps=50", "seed=4"]
    assert "with the settings it was started with: reward=rouge_l data.train.n=400" in capsys.readouterr().err
    assert with_saved_settings(["--config-dir", "c", "+reward@metrics.r1=rouge_2", last]) == [
        "--config-dir", "c", "+reward@metrics.r1=rouge_2", "reward=rouge_l", "data.train.n=400", "seed=3", last]
    assert with_saved_settings(["-m", f"ckpt_path={run_dir}"]) == ["-m", f"ckpt_path={run_dir}"]
    assert with_saved_settings(["reward=mle"]) == ["reward=mle"]


# ---------------------------------------------------------------- issue 21: moved folders, signals, records

def test_best_checkpoint_state_follows_a_moved_folder(tmp_path):
    old, new = tmp_path / "old" / "checkpoints", tmp_path / "new" / "checkpoints"
    callback = BestCheckpoint(dirpath=str(new), filename="best", monitor="val/reward", mode="max")
    score = torch.tensor(0.75)
    callback.load_state_dict({"dirpath": str(old), "best_model_path": str(old / "best.ckpt"), "best_model_score": score,
                              "best_k_models": {str(old / "best.ckpt"): score}, "kth_best_model_path":
                              str(old / "best.ckpt"), "kth_value": score, "last_model_path": ""})
    assert callback.best_model_path == callback.kth_best_model_path == str(new / "best.ckpt")
    assert callback.best_model_score == 0.75 and callback.best_k_models == {str(new / "best.ckpt"): 0.75}


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_moved_or_copied_run_resumes_in_its_own_folder_as_if_uninterrupted(mle_best, tmp_path):
    mixed = ["reward=rouge_l", f"mle_checkpoint={mle_best}", "trainer.val_check_interval=5", "checkpoint_every=3",
             "threads=1", "stages.mixed.lr=1e-3"]
    whole = run(compose_run(tmp_path, "whole", [*mixed, "trainer.max_steps=17"]))  # validations at 5, 10 and 15
    best_step = global_step(tmp_path / "whole" / "checkpoints" / "best.ckpt")
    assert best_step < 12, "the best must come before the stop, or a lost best score would go unseen"
    run(compose_run(tmp_path, "stopped", [*mixed, "trainer.max_steps=12", "test=false"]))  # stopped at step 12

    shutil.copytree(tmp_path / "stopped", tmp_path / "copied")
    original = files(tmp_path / "stopped")
    for folder in ("copied", "moved"):
        resumed = run(compose_run(tmp_path, folder, [*mixed, "trainer.max_steps=17",
                                                     f"ckpt_path={tmp_path / folder / 'checkpoints' / 'last.ckpt'}"]))
        assert resumed == whole == json.loads((tmp_path / folder / "results.json").read_text()), folder
        assert global_step(tmp_path / folder / "checkpoints" / "best.ckpt") == best_step
        summary = (tmp_path / folder / "val_summary.txt").read_text()
        assert summary == (tmp_path / "whole" / "val_summary.txt").read_text()
        if folder == "copied":  # the copy left the original alone; now move the original
            assert files(tmp_path / "stopped") == original
            (tmp_path / "stopped").rename(tmp_path / "moved")


SIGTERM_AT = "+callbacks.sigterm._target_=sigterm_probe.SigtermAt"
SMALL_BATCHES = ["data.eval_batch_size=4", "threads=1"]  # 3 test and 4 validation batches: Lightning raises between


@pytest.mark.slow
def test_sigterm_in_the_start_validation_exits_143_and_the_folder_starts_again(mle_best, tmp_path, capsys):
    mixed = ["reward=rouge_l", f"mle_checkpoint={mle_best}", "trainer.max_steps=2", "trainer.val_check_interval=2",
             "test=false", *SMALL_BATCHES]
    with pytest.raises(SystemExit) as stopped:
        run(compose_run(tmp_path, "run", [*mixed, SIGTERM_AT, "+callbacks.sigterm.fn=validate"]))
    assert stopped.value.code == 143
    assert "during the start validation (step 0); nothing was saved yet: run it again" in capsys.readouterr().err
    run(compose_run(tmp_path, "run", mixed))  # the same command
    assert global_step(tmp_path / "run" / "checkpoints" / "last.ckpt") == 2


def test_ctrl_c_in_training_exits_130_saying_how_to_resume(tmp_path, capsys):
    """Before: Lightning's status 1 and no word (its SIGTERM path printed how to resume)."""
    with pytest.raises(SystemExit) as stopped:
        run(compose_run(tmp_path, "run", ["reward=mle", "trainer.max_steps=10", "checkpoint_every=2", "test=false",
                                          "threads=1", "+callbacks.interrupt._target_=sigterm_probe.InterruptAt",
                                          "+callbacks.interrupt.step=3"]))
    assert stopped.value.code == 130
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert f"stopped by Ctrl-C during training (step 3); resume with ckpt_path={last}" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.slow
def test_sigterm_in_the_test_exits_143_and_the_resumed_run_tests_as_if_uninterrupted(tmp_path, capsys):
    mle = ["reward=mle", "trainer.max_steps=4", "trainer.val_check_interval=2", *SMALL_BATCHES]
    whole = run(compose_run(tmp_path, "whole", mle))
    with pytest.raises(SystemExit) as stopped:
        run(compose_run(tmp_path, "run", [*mle, SIGTERM_AT, "+callbacks.sigterm.fn=test"]))
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert stopped.value.code == 143 and not (tmp_path / "run" / "results.json").exists()
    assert f"during the test (step 4); resume with ckpt_path={last}" in capsys.readouterr().err
    assert run(compose_run(tmp_path, "run", [*mle, f"ckpt_path={last}"])) == whole


def tiny_cli(*overrides: str, sweep: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "trainer.train", *(["-m"] if sweep else []), *TINY, "threads=1",
                           "trainer.max_steps=2", "trainer.val_check_interval=2", *overrides], cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT, env=env)


@pytest.mark.slow
def test_sigterm_in_a_sweeps_mle_test_stops_the_sweep_with_143_and_the_sweep_continues(tmp_path):
    sweep = tmp_path / "sweep"
    point = [f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=${run_name}", "reward=mle,rouge_l",
             f"mle_checkpoint={sweep}/mle/checkpoints/best.ckpt", f"cache_dir={tmp_path / 'cache'}", *SMALL_BATCHES]
    stopped = tiny_cli(*point, SIGTERM_AT, "+callbacks.sigterm.fn=test", sweep=True)
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert f"continue the sweep with the same command and hydra.sweep.dir={sweep} resume_if_exists=true" in \
        stopped.stderr
    assert not (sweep / "mle" / "results.json").exists() and not (sweep / "rouge_l").exists()
    continued = tiny_cli(*point, "resume_if_exists=true", sweep=True)
    assert continued.returncode == 0, continued.stderr[-3000:]
    assert all(json.loads((sweep / name / "results.json").read_text())["n"] == 12 for name in ("mle", "rouge_l"))


@pytest.mark.slow
def test_a_refused_run_leaves_the_records_of_the_run_it_was_refused_for(tmp_path):
    folder, cache = tmp_path / "run", f"cache_dir={tmp_path / 'cache'}"
    assert tiny_cli(f"hydra.run.dir={folder}", "reward=mle", "test=false", cache).returncode == 0
    before = files(folder)
    refused = tiny_cli(f"hydra.run.dir={folder}", "reward=mle", "test=false", "seed=1", cache)
    assert refused.returncode != 0 and "already holds a run" in refused.stderr
    after = files(folder)
    assert {k: v for k, v in after.items() if k in before} == before  # .hydra/…/config.yaml still says seed 0
    attempts = {Path(k).parent for k in after if k not in before}  # the refused start's own records
    assert len(attempts) == 1 and attempts.pop().parent == Path(".hydra")


@pytest.mark.slow
def test_a_second_sweep_into_a_folder_with_runs_is_refused_before_hydra_writes(tmp_path):
    sweep = [f"hydra.sweep.dir={tmp_path / 'sweep'}", "hydra.sweep.subdir=${run_name}", "test=false",
             f"cache_dir={tmp_path / 'cache'}"]
    assert tiny_cli(*sweep, "reward=mle", sweep=True).returncode == 0
    before = files(tmp_path / "sweep")
    refused = tiny_cli(*sweep, "reward=mle,rouge_l", sweep=True)
    assert refused.returncode == 1 and refused.stderr.splitlines()[-1] == (
        f"SettingsError: hydra.sweep.dir {tmp_path / 'sweep'} already holds runs (mle): give the sweep a new folder, "
        "or continue them (and add points) with resume_if_exists=true")
    assert files(tmp_path / "sweep") == before  # multirun.yaml too


# ---------------------------------------------------------------- issue 41: folders, validations, stale results

def test_the_default_run_folder_is_one_per_start(monkeypatch):
    # Two starts in the same second shared runs/<data>/<time>_<run_name> and reported one model twice.
    cfg = composed_with_hydra(["reward=mle"], monkeypatch)
    assert Path(cfg.hydra.run.dir).name == f"{ATTEMPT}_mle" and ATTEMPT.endswith(f"_{os.getpid()}")


def test_a_second_start_into_a_folder_in_use_is_refused(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    with (folder / ".lock").open("a") as lock:  # the first start, still running, holds the folder's lock
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(SettingsError, match=f"output_dir {folder} is in use by another run started into it"):
            run(compose_run(tmp_path, "run", ["reward=mle", "trainer.max_steps=1", "test=false"]))
    assert not (folder / "config.yaml").exists()
    run(compose_run(tmp_path, "run", ["reward=mle", "trainer.max_steps=1", "test=false"]))  # once it has ended
    assert global_step(folder / "checkpoints" / "last.ckpt") == 1


def curve_points(run_dir: Path) -> list[dict[str, str]]:
    """Every validation of a run (val_curve.csv) without the seconds before it, which vary from run to run."""
    rows = csv.DictReader((run_dir / "val_curve.csv").open())
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


@pytest.mark.slow
def test_sigterm_in_a_mid_training_validation_is_redone_by_the_resume(tmp_path):
    # checkpoint_every=1: last.ckpt is due at step 2 too, which validates; SIGTERM stops that validation halfway
    mle = ["reward=mle", "trainer.max_steps=4", "trainer.val_check_interval=2", "checkpoint_every=1", *SMALL_BATCHES]
    whole = run(compose_run(tmp_path, "whole", mle))
    with pytest.raises(SystemExit) as stopped:
        run(compose_run(tmp_path, "run", [*mle, SIGTERM_AT, "+callbacks.sigterm.fn=fit", "+callbacks.sigterm.batch=1",
                                          "+callbacks.sigterm.step=2"]))
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert stopped.value.code == 143
    assert run(compose_run(tmp_path, "run", [*mle, f"ckpt_path={last}"])) == whole
    assert curve_points(tmp_path / "run") == curve_points(tmp_path / "whole")  # step 2's validation too


@pytest.mark.slow
def test_table4_leaves_a_run_stopped_in_its_test_as_it_is(tmp_path, capsys):
    """table4 decoded a run stopped in its test at beam 5 and rewrote its config.yaml (train false, beam 5, init_from
    itself), so that the run's own resume was refused. It names the run and writes nothing."""
    run(compose_run(tmp_path, "mle", ["reward=mle", "trainer.max_steps=2", "trainer.val_check_interval=2",
                                      "test=false"]))  # beam 2 (TINY)
    config = tmp_path / "mle" / "config.yaml"  # as a kill in the test leaves the run: tested, without results
    config.write_text(config.read_text().replace("\ntest: false\n", "\ntest: true\n"))
    before = files(tmp_path / "mle")
    with pytest.raises(EvaluationRefused, match="none of the runs given has test results"):
        load_script("table4").main([str(tmp_path / "mle"), "--metrics", "--out", str(tmp_path)])
    assert files(tmp_path / "mle") == before
    last = tmp_path / "mle" / "checkpoints" / "last.ckpt"
    assert (f"leaving out {tmp_path / 'mle'}: it has no test results (summaries.jsonl); resume it with "
            f"ckpt_path={last}") in capsys.readouterr().err


@pytest.mark.slow
def test_a_test_only_run_into_a_folder_that_holds_a_run_is_refused(mle_best, tmp_path):
    # table4's advice (train=false init_from=...) into a mixed run's folder replaced its config and results
    folder = tmp_path / "mixed"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"a mixed run's")
    (folder / "results.json").write_text('{"n": 12}\n')
    (folder / "config.yaml").write_text("stage: mixed\n")
    before = files(folder)
    with pytest.raises(SettingsError, match=f"output_dir {folder} already holds a run, whose records a test-only run"):
        run(compose_run(tmp_path, "mixed", ["reward=mle", "train=false", f"init_from={mle_best}"]))
    assert {k: v for k, v in files(folder).items() if k in before} == before


@pytest.mark.slow
def test_a_resume_that_trains_on_removes_the_test_results_of_the_weights_before(tmp_path):
    # Stopped before its end, an extended resume left the old results beside a newer best.ckpt, and table4 read them.
    mle = ["reward=mle", "trainer.val_check_interval=2", *SMALL_BATCHES]
    run(compose_run(tmp_path, "run", [*mle, "trainer.max_steps=2"]))
    assert (tmp_path / "run" / "results.json").exists() and (tmp_path / "run" / "summaries.jsonl").exists()
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    with pytest.raises(SystemExit):
        run(compose_run(tmp_path, "run", [*mle, "trainer.max_steps=6", f"ckpt_path={last}", SIGTERM_AT,
                                          "+callbacks.sigterm.fn=fit", "+callbacks.sigterm.step=6"]))
    assert global_step(tmp_path / "run" / "checkpoints" / "best.ckpt") > 2
    assert not (tmp_path / "run" / "results.json").exists() and not (tmp_path / "run" / "summaries.jsonl").exists()
