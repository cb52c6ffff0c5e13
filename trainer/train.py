"""Hydra entry point: `python -m trainer.train [overrides]`. Compose, instantiate, fit, test, report."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import hydra
import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from trainer.data import SummarizationData
from trainer.evaluate import results_table
from trainer.module import SummarizationModule

log = logging.getLogger(__name__)


def load_model_weights(model: torch.nn.Module, checkpoint_path: str) -> None:
    """Initialise `model` from a checkpoint's weights (not its optimizer): mixed runs start from MLE."""
    path = Path(checkpoint_path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"init_from: checkpoint {path} not found")
    state = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
    model.load_state_dict({k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")})


def build(cfg: DictConfig) -> tuple[SummarizationData, SummarizationModule]:
    data: SummarizationData = instantiate(cfg.data)
    data.setup()
    model = instantiate(OmegaConf.merge(cfg.model, {"config": {"vocab_size": len(data.vocab)}}))
    if cfg.init_from:
        load_model_weights(model, cfg.init_from)
    module = instantiate(cfg.module, model=model, vocab=data.vocab, output_dir=cfg.output_dir)
    return data, module


def run(cfg: DictConfig) -> dict:
    """Train, then test the best checkpoint; returns (and writes) the test results."""
    pl.seed_everything(cfg.seed, workers=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    data, module = build(cfg)
    loggers = [instantiate(c) for c in (cfg.logger or {}).values()]
    callbacks = [instantiate(c) for c in (cfg.callbacks or {}).values()]
    trainer: pl.Trainer = instantiate(cfg.trainer, logger=loggers or False, callbacks=callbacks)
    Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
    (Path(cfg.output_dir) / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    if cfg.train:
        if cfg.validate_at_start and module.reward is not None and not cfg.ckpt_path:
            trainer.validate(module, datamodule=data, verbose=False)  # the curve's first point: where RL starts
        trainer.fit(module, datamodule=data, ckpt_path=cfg.ckpt_path)
        checkpoints = trainer.checkpoint_callback
        if checkpoints is not None and checkpoints.dirpath:  # `last` is saved on validation only: keep the end state
            trainer.save_checkpoint(Path(checkpoints.dirpath) / f"{checkpoints.CHECKPOINT_NAME_LAST}.ckpt")
    if not cfg.test:
        return {}
    best = getattr(trainer.checkpoint_callback, "best_model_path", "") if cfg.train else ""
    if trainer.world_size > 1:  # a distributed sampler splits (and pads) the test set: test it whole on rank 0
        if not trainer.is_global_zero:
            return {}
        torch.distributed.destroy_process_group()  # done with the other ranks
        trainer = instantiate(cfg.trainer, devices=1, num_nodes=1, strategy="auto", logger=loggers or False,
                              callbacks=callbacks)
    trainer.test(module, datamodule=data, ckpt_path=best or cfg.ckpt_path or None)
    results = json.loads((Path(cfg.output_dir) / "results.json").read_text())
    print(results_table({cfg.run_name: results}))
    return results


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
