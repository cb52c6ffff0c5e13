"""Loggers that never block a run: wandb goes offline unless credentials exist and never prompts."""
from __future__ import annotations

import netrc
import os
from pathlib import Path

from pytorch_lightning.loggers import WandbLogger


def has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc(Path.home() / ".netrc").authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def wandb_logger(project: str = "sumrl", save_dir: str = ".", offline: bool | None = None, **kwargs) -> WandbLogger:
    """A WandbLogger that runs offline (sync later with `wandb sync`) when no credentials are found."""
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("WANDB_CONSOLE", "off")
    offline = not has_wandb_credentials() if offline is None else offline
    if offline:
        os.environ["WANDB_MODE"] = "offline"  # never prompt for a login
    return WandbLogger(project=project, save_dir=save_dir, offline=offline, **kwargs)
