"""Checkpoints that hold the latest state and starting points that are checked.

- `LatestCheckpoint` writes `last.ckpt` every N optimizer steps, after every validation, at the end of fit, on
  an interrupt (SIGTERM, SIGINT) and on request (SIGUSR1), with the RNG states, so that a resume continues the
  same run exactly.
- `BestCheckpoint` keeps `best.ckpt` and its score, found in the run's own folder when the run was moved or copied.
- `AtomicCheckpointIO` writes every checkpoint beside its target and renames it: a kill mid-write leaves
  the previous file whole.
- `checkpoint_info` / `load_model_weights` / `load_content_selector` / `check_resume` refuse a checkpoint built on
  another vocabulary or model, or from another stage, naming the file and what differs. They are the one loader of
  weights: the trainer loads frozen parts (the content selector) and the config hands them to the model.
"""
from __future__ import annotations

import errno
import hashlib
import os
import random
import shutil
import signal
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from omegaconf import DictConfig
from pytorch_lightning.callbacks import Checkpoint, ModelCheckpoint
from pytorch_lightning.plugins.environments import SLURMEnvironment

from models.bottom_up import ContentSelector, ContentSelectorConfig
from models.text.records import atomic_write
from models.text.vocab import Vocabulary

SELECTOR_STAGE = "selector"  # the stage recorded in a content selector's checkpoints


class CheckpointError(ValueError):
    """A checkpoint that cannot serve as asked: named, with what differs and the setting to change."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """torch.save beside the target, then an atomic rename over it."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, lambda partial: torch.save(checkpoint, partial))
        except (OSError, RuntimeError) as error:  # torch reports an unwritable file as a RuntimeError, without a path
            free, needed = shutil.disk_usage(path.parent).free, tensor_bytes(checkpoint)
            # torch's zip writer reports a full disk without its errno ("unexpected pos"): ask the disk, allowing for
            # the archive's own records and the run's other files
            if isinstance(error, OSError) and error.errno == errno.ENOSPC or free < needed * 1.25 + (1 << 20):
                hint = (f"the disk holding {path.parent} is full: {free >> 10:,} KiB free, the checkpoint needs about "
                        f"{max(needed >> 20, 1):,} MiB")
            else:
                hint = f"is {path.parent} writable?"
            raise CheckpointError(f"cannot write checkpoint {path}: {str(error).splitlines()[0]} ({hint})") from None


def tensor_bytes(tree: Any) -> int:
    """The bytes of the tensors in a checkpoint's nested dicts and lists: about what torch.save writes."""
    if isinstance(tree, torch.Tensor):
        return tree.numel() * tree.element_size()
    if isinstance(tree, dict):
        return sum(tensor_bytes(value) for value in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(tensor_bytes(value) for value in tree)
    return 0


class BestCheckpoint(ModelCheckpoint):
    """Lightning's ModelCheckpoint, whose state follows its run folder: a resumed run whose folder was moved or copied
    finds its best checkpoint and score in its own folder. (Lightning drops the score then and keeps the old absolute
    path: the next validation, however bad, became "best", or a copy tested the original's best.ckpt.)"""

    @property
    def state_key(self) -> str:
        # Lightning files the state under the class name: keep ModelCheckpoint's, so older checkpoints still resume.
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        old = state_dict.get("dirpath")
        if old and self.dirpath and old != self.dirpath:
            def here(path: str) -> str:
                return os.path.join(self.dirpath, os.path.relpath(path, old)) if path.startswith(old + os.sep) else path
            state_dict = {**state_dict, "dirpath": self.dirpath,
                          **{key: here(state_dict[key]) for key in ("best_model_path", "kth_best_model_path",
                                                                   "last_model_path") if state_dict.get(key)},
                          "best_k_models": {here(k): v for k, v in state_dict.get("best_k_models", {}).items()}}
        super().load_state_dict(state_dict)


def rng_states() -> dict[str, Any]:
    """Every generator a step may draw from, as tensors and plain values (loadable with weights_only=True)."""
    name, keys, position, has_gauss, gauss = np.random.get_state()
    states = {"torch": torch.get_rng_state(), "numpy": (name, torch.from_numpy(keys.astype(np.int64)), position,
                                                         has_gauss, gauss), "python": random.getstate()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    name, keys, position, has_gauss, gauss = states["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, gauss))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def validates_now(trainer: pl.Trainer) -> bool:
    """Whether Lightning validates after the training batch that has just ended (its own decision, which it keeps
    private)."""
    loop = trainer.fit_loop
    return loop.epoch_loop._should_check_val_fx(loop._data_fetcher)


class LatestCheckpoint(Checkpoint):
    """Keeps `<dirpath>/last.ckpt` at the latest state: every `every_n_steps` optimizer steps, after each
    validation (once the best-model callback, listed before this one, has taken the new score), at the end of
    fit, when SIGTERM or Ctrl-C stops the run, and after the step during which SIGUSR1 arrived (outside SLURM,
    where Lightning's requeue owns that signal). A step that validates is written after its validation, and a stop
    during a validation leaves the checkpoint before it, so that a resume never skips a validation. Carries the RNG
    states, restored on resume."""

    def __init__(self, dirpath: str, every_n_steps: int = 100):
        if every_n_steps < 1:
            raise ValueError(f"checkpoint_every must be at least 1, got {every_n_steps}")
        self.path = Path(dirpath) / "last.ckpt"
        self.every_n_steps = every_n_steps
        self._saved_step = -1
        self._requested, self._previous_handler = False, None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit" and not SLURMEnvironment.detect() and threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGUSR1, self._request)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._previous_handler is not None:
            signal.signal(signal.SIGUSR1, self._previous_handler)
            self._previous_handler = None

    def _request(self, signum: int, frame: Any) -> None:
        self._requested = True

    def save(self, trainer: pl.Trainer) -> None:
        if trainer.sanity_checking or trainer.global_step == self._saved_step:
            return
        trainer.save_checkpoint(self.path, weights_only=False)  # said, or Lightning logs a line at each save
        self._saved_step = trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        requested = trainer.strategy.reduce_boolean_decision(self._requested, all=False)  # any rank asked
        self._requested = requested or trainer.global_step % self.every_n_steps == 0
        # Lightning resumes a checkpoint of a step that validates after that validation: the save after it stands in
        if self._requested and not validates_now(trainer):
            self._requested = False
            self.save(trainer)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn == "fit":
            self._saved_step = -1  # the step is saved, but without this validation's score: save again
            self._requested = False
            self.save(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.save(trainer)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        # Before the first step there is nothing to resume: no checkpoint leaves the folder free to start again. During
        # a validation the checkpoint before it stays the latest, so that the resume validates that step again.
        if trainer.state.fn == "fit" and trainer.global_step > 0 and not trainer.validating:
            self.save(trainer)

    def state_dict(self) -> dict[str, Any]:
        return {"rng": rng_states()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_rng_states(state_dict["rng"])


def checkpoint_description(stage: str, model: torch.nn.Module, vocab: Vocabulary,
                           reading: dict[str, Any] | None = None) -> dict[str, Any]:
    """A module's `checkpoint["sumrl"]`, read back by `checkpoint_info`: enough to rebuild the model without the
    run's config (its class and settings), to read new text as its data was read (`reading`: `data_reading`), and to
    refuse it where it does not fit."""
    return {"stage": stage, "model_class": f"{type(model).__module__}.{type(model).__qualname__}",
            "model_config": asdict(model.config), "vocab": vocab.itos, "reading": dict(reading or {})}


def data_reading(pretokenized: bool, max_source_len: int, max_target_len: int) -> dict[str, Any]:
    """How a run's data reads text (`trainer.data.SummarizationData`'s settings), as its checkpoints record it."""
    return {"pretokenized": bool(pretokenized), "max_source_len": int(max_source_len),
            "max_target_len": int(max_target_len)}


def checkpoint_info(path: str | Path) -> dict[str, Any]:
    """The checkpoint's own description (stage, model config, vocabulary) and its weights; errors name the file.
    Memory-mapped: a resume reads the file again through Lightning, so this pass reads only what it uses."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} not found")
    with path.open("rb") as f:  # torch's own error for a text file is advice on how to re-save it
        if f.read(4) != b"PK\x03\x04":
            raise CheckpointError(f"checkpoint {path} is not a checkpoint file (torch.save writes a zip archive)")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except Exception as error:  # a truncated or foreign file: say which one
        raise CheckpointError(f"checkpoint {path} cannot be read ({type(error).__name__}: "
                              f"{str(error).splitlines()[0]})") from None
    if "sumrl" not in checkpoint:
        raise CheckpointError(f"checkpoint {path} was not written by sumrl (no 'sumrl' entry)")
    return {**checkpoint["sumrl"], "state_dict": checkpoint["state_dict"]}


def check_vocabulary(info: dict[str, Any], path: str | Path, vocab: Vocabulary) -> None:
    """Refuse a checkpoint trained on another vocabulary than this run's."""
    theirs, ours = info["vocab"], vocab.itos
    if theirs != ours:
        agree = sum(a == b for a, b in zip(theirs, ours))
        first = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
        raise CheckpointError(
            f"checkpoint {path} was trained on another vocabulary ({agree} of {len(ours)} entries agree, the first "
            f"difference at index {first}): use the same data and data.vocab_size / data.max_source_len")


def check_compatible(info: dict[str, Any], path: str | Path, model: torch.nn.Module, vocab: Vocabulary) -> None:
    """Refuse a checkpoint whose vocabulary or model settings differ from this run's."""
    check_vocabulary(info, path, vocab)
    ours_config = asdict(model.config)
    for key, value in info["model_config"].items():
        if ours_config.get(key) != value:
            raise CheckpointError(f"checkpoint {path} has model.config.{key}={value}, this run "
                                  f"{ours_config.get(key)}: set model.config.{key}={value}")


def load_weights(model: torch.nn.Module, info: dict[str, Any]) -> None:
    """The model's weights from a checkpoint's (`checkpoint_info`) state dict: the module's `model.` entries."""
    model.load_state_dict({k.removeprefix("model."): v for k, v in info["state_dict"].items()
                           if k.startswith("model.")})


def load_model_weights(model: torch.nn.Module, path: str | Path, vocab: Vocabulary) -> None:
    """Initialise `model` from a checkpoint's weights (not its optimizer), after checking it fits."""
    info = checkpoint_info(path)
    check_compatible(info, path, model, vocab)
    load_weights(model, info)


def load_content_selector(path: str | Path) -> ContentSelector:
    """A trained content selector from its checkpoint, frozen (eval mode, no gradients), for `model=bottom_up`;
    `checkpoint_path` says where it came from, so that `trainer.run.build` checks its vocabulary against the run's."""
    path = Path(path).expanduser()
    info = checkpoint_info(path)
    if info.get("stage") != SELECTOR_STAGE:
        raise CheckpointError(f"checkpoint {path} is not a content selector (its stage is {info.get('stage')!r}): "
                              f"train one with model=content_selector")
    model = ContentSelector(ContentSelectorConfig(**info["model_config"]))
    load_weights(model, info)
    model.checkpoint_path = str(path)
    return model.eval().requires_grad_(False)


def check_resume(path: str | Path, stage: str, model: torch.nn.Module, vocab: Vocabulary) -> None:
    """`ckpt_path` resumes a run of the same stage and model (an MLE checkpoint under a reward is a start)."""
    info = checkpoint_info(path)
    if info.get("stage") != stage:
        hint = f"start from its weights with mle_checkpoint={path}" if info.get("stage") == "mle" else \
            "resume it with its own reward setting"
        raise CheckpointError(f"ckpt_path {path} is a checkpoint of the {info.get('stage')} stage and this run is "
                              f"{stage}: ckpt_path resumes a run with its optimizer; {hint}")
    check_compatible(info, path, model, vocab)


def keep_start_as_best(trainer: pl.Trainer) -> None:
    """Make the validation just run before training (the start) the best checkpoint so far: Lightning's
    ModelCheckpoint saves nothing at step 0, so without this a run whose training never beats its start would test
    its first trained weights as "best" while its curve says the best was the start."""
    callback = trainer.checkpoint_callback
    score = trainer.callback_metrics.get(callback.monitor) if callback is not None else None
    if score is None:
        return
    path = str(Path(callback.dirpath) / f"{callback.filename}{callback.FILE_EXTENSION}")
    trainer.save_checkpoint(path, weights_only=False)
    callback.best_model_path = callback.kth_best_model_path = path
    callback.best_model_score = callback.kth_value = score.detach().clone()
    callback.best_k_models = {path: callback.best_model_score}


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
