"""The run: build the data and the model from the composed config, fit them, test the best checkpoint, and end in
one line where a signal stops it (`trainer.train` is its command line)."""
from __future__ import annotations

import json
import logging
import signal
import sys
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from pytorch_lightning.utilities import rank_zero_only
from pytorch_lightning.utilities.exceptions import SIGTERMException

from models.summarizer import HoldsTrainedParts
from models.text.records import write_text
from rewards.configs import instantiate_or_refuse
from rewards.repeats import penalty_note
from trainer.checkpoints import (AtomicCheckpointIO, check_resume, check_vocabulary, checkpoint_info, data_reading,
                                 keep_start_as_best, load_model_weights, provenance)
from trainer.data import SummarizationData
from trainer.evaluate import results_table, table_record
from trainer.folders import STARTED_WITH, check_run_dir, run_folder_lock
from trainer.host_memory import keep_freed_memory
from trainer.module import SummarizationModule
import trainer.precision  # noqa: F401  (registers the resolver trainer.precision may name)
from trainer.settings import (SettingsError, check_resumed_settings, check_settings, check_unlabelled,
                              ended_run)

log = logging.getLogger(__name__)


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
                                   unlabelled_fraction=data.unlabelled_fraction)
    module.reading = data_reading(data.pretokenized, data.max_source_len, data.max_target_len)
    if cfg.train:
        check_unlabelled(data, module)
    return data, module


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
    ended = ended_run(cfg)
    if ended is not None:  # a continued sweep's finished point keeps its results rather than testing again
        log.info("%s ended and was tested with these settings: its results kept (delete %s to test it again)",
                 cfg.output_dir, Path(cfg.output_dir) / "results.json")
        results = json.loads((Path(cfg.output_dir) / "results.json").read_text())
        show_results(cfg.run_name, results, ended.get("table", {}).get("columns", {}))
        return results
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
            cfg.table = table_record(module.reward, module.metrics_at_test, cfg.row_names, cfg.rl.length_neutral)
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
    show_results(cfg.run_name, results, cfg.table["columns"] if "table" in cfg else {})  # a selector: its own keys
    return results


def show_results(name: str, results: dict, columns: dict) -> None:
    """The run's test results as a table on the console."""
    rows = {name: {k: v for k, v in results.items() if k != "greedy"}}
    if "greedy" in results:  # the greedy decodes without the test's rules, beside its beam (trainer.module.test_step)
        rows = {f"{name} (beam)": rows[name], f"{name} (greedy)": results["greedy"]}
    print(results_table(rows, columns))
