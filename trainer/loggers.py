"""Loggers that never block a run: wandb goes offline unless credentials exist and never prompts."""
from __future__ import annotations

import netrc
import os
import uuid
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
    return WandbLogger(project=project, save_dir=save_dir, offline=offline, id=run_id(save_dir), resume="allow",
                       **kwargs)


def run_id(save_dir: str) -> str:
    """The wandb run id of the run in `save_dir`, made on its first start: a resume logs to the same run."""
    path = Path(save_dir) / "wandb_id.txt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(uuid.uuid4().hex[:12] + "\n")
    return path.read_text().strip()
