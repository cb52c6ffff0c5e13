"""Hydra entry point: `python -m trainer.train [overrides]`. Compose, instantiate, fit, test, report."""
from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import logging
import os
import signal
import sys
import tempfile
import warnings
from contextlib import contextmanager, nullcontext
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Iterator

import hydra
import pytorch_lightning as pl
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from pytorch_lightning.utilities import rank_zero_only
from pytorch_lightning.utilities.exceptions import SIGTERMException

from models.summarizer import HoldsTrainedParts
from models.text.extras import MissingExtra
from models.text.records import DataError, write_text
from rewards.base import NotAReward
from rewards.configs import ConfigRefused, RewardConfigError, instantiate_or_refuse
from rewards.pretrained import PretrainedNotFound
from rewards.repeats import penalty_note
from trainer.checkpoints import (AtomicCheckpointIO, CheckpointError, check_resume, check_vocabulary, checkpoint_info,
                                 data_reading, keep_start_as_best, load_model_weights)
from trainer.data import SummarizationData
from trainer.evaluate import results_table, table_record
from trainer.host_memory import keep_freed_memory
from trainer.module import SummarizationModule

log = logging.getLogger(__name__)

# A resumed run continues in its own directory: hydra.run.dir follows ckpt_path (conf/train.yaml).
OmegaConf.register_new_resolver("run_dir_of", lambda ckpt, default: str(run_dir_of(ckpt)) if ckpt else default,
                                replace=True)
# Each start keeps Hydra's records in .hydra/<attempt>/ (conf/train.yaml): a refused start overwrites no other's.
ATTEMPT = f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{os.getpid()}"
OmegaConf.register_new_resolver("attempt", lambda: ATTEMPT, replace=True)
# An integer trainer.val_check_interval counts optimizer steps across epochs; a float, a fraction of each epoch.
OmegaConf.register_new_resolver("val_epochs", lambda every: None if isinstance(every, int) else 1, replace=True)


def attempt_log(output_dir: str, job: str) -> str:
    """This start's log file, `<run>/.hydra/<attempt>/<job>.log`, its folder made here: a DDP rank that Lightning
    starts with hydra.output_subdir=null would otherwise log into a folder nobody made."""
    folder = Path(output_dir) / ".hydra" / ATTEMPT
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder / f"{job}.log")


OmegaConf.register_new_resolver("attempt_log", attempt_log, replace=True)
RESUME_KEYS = ("seed", "stage", "data", "model", "optimizer", "module", "trainer")  # a resume must not change these
# ... except how long it trains and where: a resume may extend a run, or continue it on other devices
RESUME_FREE = {"trainer": {"max_steps", "max_epochs", "accelerator", "devices", "num_nodes", "strategy",
                           "enable_progress_bar", "default_root_dir", "profiler"}}


def resumed_settings(tree: dict) -> dict:
    """The settings a resume must keep (`RESUME_KEYS`, less `RESUME_FREE`), of a plain config tree."""
    return {key: {k: v for k, v in value.items() if k not in RESUME_FREE[key]}
            if isinstance(value, dict) and key in RESUME_FREE else value
            for key, value in ((k, tree.get(k)) for k in RESUME_KEYS)}


class SettingsError(ValueError):
    """A setting that cannot work, refused before training starts."""


# What sumrl-train ends with as one line (status 1) instead of a traceback: settings, data, configs and checkpoints
# that cannot serve, and a run stopped by non-finite losses. Anything else is a defect, and keeps its traceback.
REFUSALS = (SettingsError, CheckpointError, DataError, RewardConfigError, ConfigRefused, PretrainedNotFound, NotAReward,
            FloatingPointError, MissingExtra)


def run_dir_of(ckpt_path: str) -> Path:
    """`<run>/checkpoints/<name>.ckpt` → `<run>`."""
    return Path(ckpt_path).expanduser().resolve().parent.parent


def differences(saved: Any, current: Any, key: str = "") -> list[tuple[str, Any, Any]]:
    """Every dotted key whose value differs between two plain config trees, in key order. Keys the saved tree
    lacks are settings added to sumrl since that run started: not a change."""
    if isinstance(saved, dict) and isinstance(current, dict):
        return [found for name in sorted(saved)
                for found in differences(saved.get(name), current.get(name), f"{key}.{name}" if key else name)]
    return [] if saved == current else [(key, saved, current)]


def check_settings(cfg: DictConfig) -> None:
    """Settings that cannot work, refused before any work starts (data, model, run folder)."""
    for key in ("seed", "threads"):
        value = cfg.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise SettingsError(f"{key}={value!r}: give a whole number")
    if cfg.get("threads") is not None and cfg.threads < 1:
        raise SettingsError(f"threads={cfg.threads}: give 1 or more, or null for PyTorch's default")
    lr = cfg.optimizer.get("lr")
    if lr is not None and lr < 0:
        raise SettingsError(f"optimizer.lr={lr} (stages.{cfg.stage}.lr): a learning rate cannot be negative")
    if cfg.train:
        check_it_trains(cfg, lr)
    for key in ("max_steps", "max_epochs"):
        if cfg.train and cfg.trainer.get(key) == 0:
            raise SettingsError(f"trainer.{key}=0 trains nothing: give it a positive value (or -1), or test a "
                                "checkpoint with train=false init_from=<checkpoint>")
    if cfg.trainer.get("accelerator") in ("gpu", "cuda") and not torch.cuda.is_available():
        raise SettingsError(f"trainer.accelerator={cfg.trainer.accelerator} (trainer=gpu) needs a CUDA GPU, and torch "
                            f"{torch.__version__} sees none: use trainer=default (the CPU, or any device found)")
    # A grid's MLE point names its own best checkpoint as the sweep's mle_checkpoint: that one is its output.
    mle = cfg.mle_checkpoint
    if (mle and not cfg.ckpt_path and cfg.init_from != mle and run_dir_of(mle) != Path(cfg.output_dir).resolve()
            and given_on_the_command_line("mle_checkpoint")):
        raise SettingsError(f"mle_checkpoint={mle} is not used: this {cfg.stage} run starts from init_from="
                            f"{cfg.init_from} (stages.{cfg.stage}.init_from); set stages.{cfg.stage}.init_from={mle} "
                            "to start from it, or leave mle_checkpoint unset")


def given_on_the_command_line(key: str) -> bool:
    """Whether the user set `key` (a grid experiment's own value, such as its sweep's MLE point, is not theirs to
    answer for). Outside a Hydra app every setting counts as given."""
    if not HydraConfig.initialized():
        return True
    overrides = OverridesParser.create().parse_overrides(list(HydraConfig.get().overrides.task))
    return any(override.key_or_group == key for override in overrides)


def check_it_trains(cfg: DictConfig, lr: float | None) -> None:
    """Runs that would train nothing, yet end as trained runs in a table (a difference of +0.00 their only sign)."""
    if lr == 0:
        raise SettingsError(f"optimizer.lr=0 (stages.{cfg.stage}.lr) trains nothing: give a positive learning rate, "
                            "or test a checkpoint with train=false init_from=<checkpoint>")
    steps, every = cfg.trainer.get("max_steps"), cfg.trainer.get("val_check_interval")
    # a mixed run keeps its best validation, its start included: with none after the start it tests (and tabulates)
    # the start
    if cfg.stage == "mixed" and cfg.test and isinstance(every, int) and steps and 0 < steps < every:
        raise SettingsError(f"trainer.val_check_interval={every} is more than trainer.max_steps={steps} "
                            f"(stages.mixed.val_every, stages.mixed.steps): this mixed run would never validate after "
                            "its start, and would test its starting weights")
    weights = (cfg.get("reward") or {}).get("weights")
    if weights and not any(weights.values()):
        raise SettingsError(f"reward.weights are all 0 ({', '.join(weights)}): the reward would be 0 whatever the "
                            "summary; give some term a weight")


def holds_a_run(folder: Path) -> bool:
    """A folder holds a run once it has a checkpoint to resume or test results; one stopped before either is reused."""
    return (folder / "checkpoints" / "last.ckpt").exists() or (folder / "results.json").exists()


def check_run_dir(cfg: DictConfig) -> None:
    """A new run gets a fresh directory (a second sweep into the same folder would start from the first sweep's
    MLE model); a resume continues its own directory, with the settings it was started with."""
    out = Path(cfg.output_dir).expanduser().resolve()
    saved = out / "config.yaml"
    last = out / "checkpoints" / "last.ckpt"
    if cfg.ckpt_path:
        if run_dir_of(cfg.ckpt_path) != out:
            raise SettingsError(f"ckpt_path {cfg.ckpt_path} resumes the run in {run_dir_of(cfg.ckpt_path)}, but "
                                f"output_dir is {out}: leave hydra.run.dir / output_dir unset when resuming")
    elif not cfg.train and holds_a_run(out):
        raise SettingsError(f"output_dir {out} already holds a run, whose records a test-only run would replace: leave "
                            "hydra.run.dir unset (a folder of its own), or give the test another folder")
    elif cfg.train and rank_zero_only.rank == 0 and holds_a_run(out) and not any(out.glob("hpc_ckpt_*.ckpt")):
        # (other DDP ranks start in rank 0's directory; hpc_ckpt: Lightning's own SLURM requeue)
        resume = f", or resume it with ckpt_path={last}" if last.exists() else ""
        raise SettingsError(f"output_dir {out} already holds a run: give the run (hydra.run.dir) or the sweep "
                            f"(hydra.sweep.dir) a new folder{resume}")


def check_resumed_settings(cfg: DictConfig) -> None:
    """A resume keeps every setting that changes training (`RESUME_KEYS`): each one this resume changes is named, before
    any data is read."""
    saved = Path(cfg.output_dir).expanduser().resolve() / "config.yaml"
    if not cfg.ckpt_path or run_dir_of(cfg.ckpt_path) != saved.parent or not saved.exists():
        return
    started, current = OmegaConf.to_container(OmegaConf.load(saved)), OmegaConf.to_container(cfg, resolve=True)
    # a trainer setting the run did not give was Lightning's default: `+trainer.<key>=...` now changes it
    lightning = inspect.signature(pl.Trainer.__init__).parameters
    given = started.get("trainer", {})
    started["trainer"] = {**{key: lightning[key].default for key in current.get("trainer", {})
                             if key in lightning and key not in given}, **given}
    changed = differences(resumed_settings(started), resumed_settings(current))
    if changed:
        listed = "; ".join(f"{key}={old} (this resume: {new})" for key, old, new in changed)
        raise SettingsError(f"ckpt_path: the run was started with {listed}: resume with the run's own settings "
                            f"(ckpt_path=<its folder> alone resumes with them)")


@contextmanager
def run_folder_lock(folder: Path) -> Iterator[None]:
    """Holds `<folder>/.lock` while this run uses the folder, so that a second start into it meanwhile is refused. The
    kernel drops the lock when the process ends, however it ends: no stale lock to clear after a kill."""
    new = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with (folder / ".lock").open("a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise SettingsError(f"output_dir {folder} is in use by another run started into it: give this run a "
                                    "folder of its own (hydra.run.dir, or leave it unset)") from None
            yield
    finally:
        if new and [p.name for p in folder.iterdir()] == [".lock"]:  # a start refused before writing: leave nothing
            (folder / ".lock").unlink()
            folder.rmdir()


def check_writable(folder: Path, setting: str) -> None:
    """Refuse a run folder that cannot be written, by writing to it: permission bits do not bind root."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        raise SettingsError(f"{setting}: cannot write to {folder} ({error.strerror})") from None


def check_sweep_axes(config: DictConfig) -> None:
    """Every value the sweep varies must be named by its points' folders (hydra.sweep.subdir): two points in one
    folder, the second is refused only once the first has trained."""
    subdir = str(config.hydra.sweep._get_node("subdir")._value())  # as written: `${seed}`, not its value
    if "job.num" in subdir or "override_dirname" in subdir:  # a folder per point whatever varies
        return
    written = OmegaConf.to_container(config.hydra.overrides.task, resolve=False)  # `${hydra:...}` in a value: as is
    for override in OverridesParser.create().parse_overrides(written):
        key = override.key_or_group
        named = f"${{{key}}}" in subdir or (key == "reward" and ("run_name" in subdir or "choices.reward" in subdir))
        if override.is_sweep_override() and not named:
            raise SettingsError(f"the sweep varies {key}, which hydra.sweep.subdir={subdir} does not name: its points "
                                "would share one folder; name it there (hydra.sweep.subdir=...) or sweep it in "
                                "another folder")


def check_sweep_dir(config: DictConfig) -> None:
    """A second sweep into a folder that holds runs would rewrite its multirun.yaml, then be refused point by point:
    refuse it first, unless it continues those runs."""
    check_sweep_axes(config)
    folder = Path(config.hydra.sweep.dir)
    check_writable(folder, "hydra.sweep.dir")
    held = sorted(str(p.parent.parent.relative_to(folder)) for p in folder.glob("**/checkpoints/last.ckpt"))
    if held and not config.resume_if_exists:
        raise SettingsError(f"hydra.sweep.dir {folder} already holds runs ({', '.join(held)}): give the sweep a new "
                            "folder, or continue them (and add points) with resume_if_exists=true")


class RunFolders(Callback):
    """Hydra callback (conf/train.yaml): checks run and sweep folders before Hydra writes its records there. Hydra
    turns a callback's exceptions into warnings, so a refusal exits (status 1) with its one-line message."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        HydraConfig.instance().set_config(config)  # the folder's name reads the reward choice; Hydra sets it next
        try:
            check_writable(Path(config.hydra.run.dir), "hydra.run.dir")
        except SettingsError as error:
            raise SystemExit(f"SettingsError: {error}") from None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_sweep_dir(config)
            hold_sweep_lock(Path(config.hydra.sweep.dir))
        except SettingsError as error:
            raise SystemExit(f"SettingsError: {error}") from None


SWEEP_LOCKS: dict[Path, IO[str]] = {}  # held by the sweep's own process (callbacks are pickled to its jobs)


def hold_sweep_lock(folder: Path) -> IO[str]:
    """`<sweep>/.sweep.lock`, held while this sweep runs (the kernel drops it when the process ends): a second sweep
    into the folder meanwhile is refused before Hydra rewrites the first one's multirun.yaml."""
    folder = folder.resolve()
    if folder in SWEEP_LOCKS:
        return SWEEP_LOCKS[folder]
    handle = (folder / ".sweep.lock").open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise SettingsError(f"hydra.sweep.dir {folder} is in use by a sweep still running there: give this sweep a "
                            "folder of its own, or continue that one once it has ended (resume_if_exists=true)") from None
    SWEEP_LOCKS[folder] = handle
    return handle


def build(cfg: DictConfig) -> tuple[SummarizationData, pl.LightningModule]:
    data: SummarizationData = instantiate_or_refuse(cfg.data)
    data.setup()
    model = instantiate_or_refuse(OmegaConf.merge(cfg.model, {"config": {"vocab_size": len(data.vocab)}}))
    for part in model.frozen_parts if isinstance(model, HoldsTrainedParts) else []:
        check_vocabulary(checkpoint_info(part.checkpoint_path), part.checkpoint_path, data.vocab)
    if cfg.ckpt_path:
        check_resume(cfg.ckpt_path, cfg.stage, model, data.vocab)
    elif cfg.init_from and cfg.init_from != "none":
        load_model_weights(model, cfg.init_from, data.vocab)
    elif cfg.stage == "mixed" and cfg.train and cfg.init_from != "none":
        raise SettingsError("a reward other than mle trains the mixed stage, which starts from an MLE model: set "
                            "mle_checkpoint=<mle run>/checkpoints/best.ckpt (or init_from=none for random weights)")
    module = instantiate_or_refuse(cfg.module, model=model, vocab=data.vocab, output_dir=cfg.output_dir,
                                   unlabelled_fraction=data.unlabelled_fraction,
                                   reading=data_reading(data.pretokenized, data.max_source_len, data.max_target_len))
    if cfg.train:
        check_unlabelled(data, module)
    return data, module


def check_unlabelled(data: SummarizationData, module: SummarizationModule) -> None:
    """Articles without references train only a reward with a reference-free term: MLE and reference-based
    rewards would give them nothing, silently."""
    if data.unlabelled is None:
        return
    mixed = f"data {data.name} mixes unlabelled articles ({data.unlabelled.name}) into training"
    if module.reward is None:
        raise SettingsError(f"reward=mle learns from references only, but {mixed}: train the MLE model on data "
                            "without `unlabelled` (data=cnndm_sample, say)")
    if module.reward.needs_reference:
        raise SettingsError(f"reward {module.reward.name} needs references, but {mixed}, where it is 0: use a "
                            "reward with a reference-free term (reward=qa_learned, say) or data without `unlabelled`")


def how_to_continue(cfg: DictConfig) -> str:
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return (f"continue the sweep with the same command and hydra.sweep.dir={HydraConfig.get().sweep.dir} "
                "resume_if_exists=true")
    last = Path(cfg.output_dir) / "checkpoints" / "last.ckpt"
    if last.exists():
        return f"resume with ckpt_path={last}"
    return f"nothing was saved yet: run it again (hydra.run.dir={cfg.output_dir} holds no checkpoint and is reused)"


def call_or_stop(trainer: pl.Trainer, method: str, cfg: DictConfig, **kwargs: Any) -> Any:
    """`trainer.<method>(**kwargs)`; a SIGTERM during it stops the run with status 143 and Ctrl-C with 130 (so `&&
    next` and the sweep's next points stop too), saying how to continue. Lightning only notes a SIGTERM, and raises at
    some steps; it ends a Ctrl-C with status 1 and no word."""
    signal_name, status = "SIGTERM", 128 + signal.SIGTERM
    try:
        result = getattr(trainer, method)(**kwargs)
        if not trainer.received_sigterm:
            return result
    except SIGTERMException:  # during fit, LatestCheckpoint has saved the latest state
        pass
    except SystemExit:
        if not trainer.interrupted or trainer.received_sigterm:
            raise
        signal_name, status = "Ctrl-C", 128 + signal.SIGINT
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Lightning ignores further Ctrl-Cs while it stops
    stage = {"validate": "the start validation", "fit": "training", "test": "the test"}[method]
    print(f"stopped by {signal_name} during {stage} (step {trainer.global_step}); {how_to_continue(cfg)}",
          file=sys.stderr)
    raise SystemExit(status)


def provenance(cfg: DictConfig) -> dict[str, Any]:
    """The run's id (from the folder it started in, so DDP ranks agree) and the ids of the runs its weights descend
    from, oldest first: kept in config.yaml and every checkpoint, so that table4 compares a run with the MLE run it
    started from wherever their folders have gone. A resume is the same run: its checkpoint says so."""
    if cfg.ckpt_path:
        info = checkpoint_info(cfg.ckpt_path)
        if "run_id" in info:
            return {"run_id": info["run_id"], "lineage": list(info.get("lineage", []))}
    lineage = []
    if cfg.init_from and cfg.init_from != "none":
        info = checkpoint_info(cfg.init_from)
        lineage = [*info.get("lineage", []), *([info["run_id"]] if "run_id" in info else [])]
    folder = str(Path(cfg.output_dir).expanduser().resolve())
    return {"run_id": hashlib.sha1(folder.encode()).hexdigest()[:12], "lineage": lineage}


def quiet_frameworks() -> None:
    """A console a person reads: progress bars, a line per stage, the tables. What the frameworks add (devices, tips,
    a deprecation inside Lightning) is nothing a user can act on."""
    for name in ("pytorch_lightning", "lightning_fabric", "absl"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # a mixed run's start checkpoint (`keep_start_as_best`) is written before Lightning's checkpoint callback looks
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                            category=FutureWarning)


def run(cfg: DictConfig) -> dict:
    """Train, then test the best checkpoint; returns (and writes) the test results."""
    quiet_frameworks()
    check_settings(cfg)
    # other DDP ranks work in rank 0's folder
    with run_folder_lock(Path(cfg.output_dir).expanduser().resolve()) if rank_zero_only.rank == 0 else nullcontext():
        results = train_and_test(cfg)
    if cfg.profiler and rank_zero_only.rank == 0:  # the profiler writes files only, at each stage's end
        profiles = sorted(Path(cfg.output_dir).glob("*-profile.txt"))
        log.info("where the time went (profiler): %s", ", ".join(str(path) for path in profiles))
    return results


def train_and_test(cfg: DictConfig) -> dict:
    """`run`'s work, once its settings are checked and its folder is its own."""
    pl.seed_everything(cfg.seed, workers=True)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    if cfg.keep_freed_memory:
        keep_freed_memory()
    last = Path(cfg.output_dir) / "checkpoints" / "last.ckpt"
    if cfg.resume_if_exists and not cfg.ckpt_path and last.exists():  # a requeued cluster job picks up its run
        cfg.ckpt_path = str(last)
    check_resumed_settings(cfg)
    data, module = build(cfg)  # checks the starting point first: its message names the right setting
    if isinstance(module, SummarizationModule) and module.reward is not None:
        log.info(penalty_note(module.reward, cfg.rl.penalize_repeats))
    check_run_dir(cfg)
    loggers = [instantiate(c) for c in (cfg.logger or {}).values() if c is not None]
    callbacks = [instantiate(c) for c in (cfg.callbacks or {}).values() if c is not None]   # null drops one
    trainer: pl.Trainer = instantiate_or_refuse(cfg.trainer, logger=loggers or False, callbacks=callbacks,
                                                plugins=[AtomicCheckpointIO()])
    Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
    module.provenance = provenance(cfg)
    with open_dict(cfg):
        cfg.update(module.provenance)
        if isinstance(module, SummarizationModule):  # table4 reads the run's row, test metric and columns here
            cfg.table = table_record(module.reward, module.metrics_at_test, cfg.rows, cfg.rl.length_neutral)
    for logger in loggers:  # the composed config is the run's: wandb's run config, the CSV logger's hparams.yaml
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    if not cfg.ckpt_path:  # a resume keeps the record of how the run was started (and was checked against it)
        write_text(Path(cfg.output_dir) / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        if HydraConfig.initialized():  # what `ckpt_path=<this folder>` alone resumes with
            write_text(Path(cfg.output_dir) / STARTED_WITH, OmegaConf.to_yaml(
                OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False)))
    if cfg.train:
        if cfg.validate_at_start and cfg.stage == "mixed" and not cfg.ckpt_path:
            # the curve's first point: where RL starts
            call_or_stop(trainer, "validate", cfg, model=module, datamodule=data, verbose=False)
            keep_start_as_best(trainer)
        if cfg.ckpt_path:  # results of the weights before this resume: no table may read them beside a newer best.ckpt
            for name in ("results.json", "summaries.jsonl"):
                (Path(cfg.output_dir) / name).unlink(missing_ok=True)
        call_or_stop(trainer, "fit", cfg, model=module, datamodule=data, ckpt_path=cfg.ckpt_path)
    if not cfg.test:
        return {}
    best = getattr(trainer.checkpoint_callback, "best_model_path", "") if cfg.train else ""
    if trainer.world_size > 1:  # a distributed sampler splits (and pads) the test set: test it whole on rank 0
        if not trainer.is_global_zero:
            return {}
        torch.distributed.destroy_process_group()  # done with the other ranks
        trainer = instantiate(cfg.trainer, devices=1, num_nodes=1, strategy="auto", logger=loggers or False,
                              callbacks=callbacks)
    call_or_stop(trainer, "test", cfg, model=module, datamodule=data, ckpt_path=best or cfg.ckpt_path or None,
                 verbose=False)  # printed once, below
    results = json.loads((Path(cfg.output_dir) / "results.json").read_text())
    rows = {cfg.run_name: {k: v for k, v in results.items() if k != "greedy"}}
    if "greedy" in results:  # the greedy decodes without the test's rules, beside its beam (trainer.module.test_step)
        rows = {f"{cfg.run_name} (beam)": rows[cfg.run_name], f"{cfg.run_name} (greedy)": results["greedy"]}
    print(results_table(rows, cfg.table["columns"] if "table" in cfg else {}))  # a selector: its own keys
    return results


STARTED_WITH = "overrides.yaml"  # in a run's folder: the command line's settings it was started with


def with_saved_settings(args: list[str]) -> list[str]:
    """A single run's command line with `ckpt_path=<run folder, or a checkpoint in it>`, given the settings the run
    was started with (`<run>/overrides.yaml`) where its own overrides do not set them: a resume needs no more than
    the folder. An override that changes a setting of the run is then named by the resume check."""
    if "-m" in args or "--multirun" in args:
        return args
    at = next((i for i in reversed(range(len(args))) if args[i].startswith("ckpt_path=")), None)
    if at is None or not args[at].split("=", 1)[1]:
        return args
    given = Path(args[at].split("=", 1)[1]).expanduser()
    checkpoint = given / "checkpoints" / "last.ckpt" if given.is_dir() else given
    record = run_dir_of(str(checkpoint)) / STARTED_WITH
    if not record.exists():
        return [*args[:at], f"ckpt_path={checkpoint}", *args[at + 1:]]
    parser = OverridesParser.create()

    def key(override: str) -> str:
        parsed = parser.parse_override(override)
        return f"{parsed.key_or_group}@{parsed.package}" if parsed.package else parsed.key_or_group

    own = {key(a) for a in args if "=" in a and not a.startswith("-")}
    saved = [o for o in OmegaConf.to_container(OmegaConf.load(record)) if key(o) not in own]
    if saved:
        print(f"resuming {record.parent} with the settings it was started with: {' '.join(saved)}", file=sys.stderr)
    return [*args[:at], *saved, f"ckpt_path={checkpoint}", *args[at + 1:]]


@hydra.main(version_base="1.3", config_path="pkg://conf", config_name="train")
def train(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except REFUSALS as error:
        raise SystemExit(f"{type(error).__name__}: {error}") from None


def main() -> None:
    """`sumrl-train` and `python -m trainer.train`: Hydra's command line, a resume's settings read from its folder."""
    sys.argv = [sys.argv[0], *with_saved_settings(sys.argv[1:])]
    train()


if __name__ == "__main__":
    main()
