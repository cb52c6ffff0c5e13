"""Settings that cannot work, refused before any work starts, each in one line naming the setting: values out of
range, runs that would train nothing, a resume that changes how the run trains, data a reward cannot read."""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from models.text.extras import MissingExtra
from models.text.pretrained import PretrainedNotFound
from models.text.records import DataError
from rewards.base import NotAReward
from rewards.configs import ConfigRefused, RewardConfigError
from trainer.checkpoints import CheckpointError
from trainer.data import SummarizationData
from trainer.folders import SettingsError, run_dir_of
from trainer.module import SummarizationModule

RESUME_KEYS = ("seed", "stage", "data", "model", "optimizer", "module", "trainer")  # a resume must not change these


# ... except how long it trains and where: a resume may extend a run, or continue it on other devices
RESUME_FREE = {"trainer": {"max_steps", "max_epochs", "accelerator", "devices", "num_nodes", "strategy",
                           "enable_progress_bar", "default_root_dir", "profiler"}}


def resumed_settings(tree: dict) -> dict:
    """The settings a resume must keep (`RESUME_KEYS`, less `RESUME_FREE`), of a plain config tree."""
    return {key: {k: v for k, v in value.items() if k not in RESUME_FREE[key]}
            if isinstance(value, dict) and key in RESUME_FREE else value
            for key, value in ((k, tree.get(k)) for k in RESUME_KEYS)}


# What sumrl-train ends with as one line (status 1) instead of a traceback: settings, data, configs and checkpoints
# that cannot serve, and a run stopped by non-finite losses. Anything else is a defect, and keeps its traceback.
REFUSALS = (SettingsError, CheckpointError, DataError, RewardConfigError, ConfigRefused, PretrainedNotFound, NotAReward,
            FloatingPointError, MissingExtra)


def differences(saved: Any, current: Any, key: str = "") -> list[tuple[str, Any, Any]]:
    """Every dotted key whose value differs between two plain config trees, in key order. Keys the saved tree
    lacks are settings added to sumrl since that run started: not a change."""
    if isinstance(saved, dict) and isinstance(current, dict):
        return [found for name in sorted(saved)
                for found in differences(saved.get(name), current.get(name), f"{key}.{name}" if key else name)]
    return [] if saved == current else [(key, saved, current)]


def check_settings(cfg: DictConfig) -> None:
    """Settings that cannot work, refused before any work starts (data, model, run folder)."""
    for key in cfg:  # an experiment's `???` (experiment=scialom_table2_sample's news_grid, say) is the user's to give
        if OmegaConf.is_missing(cfg, key):
            raise SettingsError(f"{key} is not set: give {key}=<value> (the config marks it ???, for you to fill)")
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


def check_resumed_settings(cfg: DictConfig) -> None:
    """A resume keeps every setting that changes training (`RESUME_KEYS`): each one this resume changes is named, before
    any data is read."""
    saved = Path(cfg.output_dir).expanduser().resolve() / "config.yaml"
    if not cfg.ckpt_path or run_dir_of(cfg.ckpt_path) != saved.parent or not saved.exists():
        return
    started, current = OmegaConf.to_container(OmegaConf.load(saved)), OmegaConf.to_container(cfg, resolve=True)
    if started.get("stage") != current.get("stage"):  # another stage's checkpoint: its check names mle_checkpoint
        return
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


def ended_run(cfg: DictConfig) -> dict | None:
    """The saved config of a run that `resume_if_exists` would only test again (a continued sweep's finished
    point): its test's results are newer than its last checkpoint, and every setting is as it was started. Else
    None: the run resumes, trains if it has steps left, and tests."""
    out = Path(cfg.output_dir)
    last, saved = out / "checkpoints" / "last.ckpt", out / "config.yaml"
    written = [out / "results.json", out / "summaries.jsonl"]
    if not (cfg.resume_if_exists and not cfg.ckpt_path and cfg.train and cfg.test and last.exists() and saved.exists()
            and all(path.exists() for path in written)):
        return None
    if min(path.stat().st_mtime for path in written) < last.stat().st_mtime:
        return None  # stopped after a checkpoint its test never saw
    started = OmegaConf.to_container(OmegaConf.load(saved))
    current = {key: value for key, value in OmegaConf.to_container(cfg, resolve=True).items()
               if key not in ("resume_if_exists", "ckpt_path")}
    # every current setting, test settings included (the saved record adds its provenance and table)
    return started if not differences(current, started) else None


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
