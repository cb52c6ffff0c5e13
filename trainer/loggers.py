"""Loggers that never block a run: wandb goes offline unless credentials exist and never prompts. Each job of a sweep
is its own wandb run, grouped under the sweep's folder and finished when the job ends."""
from __future__ import annotations

import logging
import netrc
import os
import re
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from models.text.records import write_text

if TYPE_CHECKING:  # Lightning is imported where a logger is made: a Hydra callback here loads for --help too
    from pytorch_lightning.loggers import WandbLogger


def has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc(Path.home() / ".netrc").authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


TIME_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}")  # Hydra's default sweep folder's name


def sweep_group(folder: str | Path) -> str:
    """A sweep's name, its runs' wandb group: its folder's name, after its experiment's where the name is Hydra's time
    stamp (`demo_grid/2026-12-02_13-45-54`)."""
    folder = Path(folder)
    return f"{folder.parent.name}/{folder.name}" if TIME_STAMP.fullmatch(folder.name) else folder.name


def sweep_of_this_job() -> str | None:
    """The wandb group of the sweep this job belongs to, or None outside a multirun."""
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return sweep_group(HydraConfig.get().sweep.dir)
    return None


def wandb_logger(project: str = "sumrl", save_dir: str = ".", offline: bool | None = None, **kwargs) -> WandbLogger:
    """A WandbLogger that runs offline (sync later with `wandb sync`) when no credentials are found; in a sweep its
    run is grouped under the sweep's name. The other `kwargs` go to `wandb.init` (name, job_type, tags...)."""
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("WANDB_CONSOLE", "off")
    offline = not has_wandb_credentials() if offline is None else offline
    if offline:
        os.environ["WANDB_MODE"] = "offline"  # never prompt for a login
    os.environ.setdefault("WANDB_INIT_TIMEOUT", "20")  # wandb's own 90 s, then a traceback, without a network
    from pytorch_lightning.loggers import WandbLogger
    logger = WandbLogger(project=project, save_dir=save_dir, offline=offline, id=run_id(save_dir), resume="allow",
                         **{"group": sweep_of_this_job(), **kwargs})
    logger._wandb_init.pop("anonymous", None)  # Lightning passes None, which wandb >= 0.19 warns about at each start
    if not offline:
        try:
            logger.experiment  # wandb.init: an unreachable server is named now, before any work, not mid-run
        except Exception as error:  # wandb's CommError, UsageError, a timeout: one line saying what to do
            reason = " ".join(str(error).split())[:160]
            raise WandbUnreachable(f"logger=wandb: cannot start the wandb run ({type(error).__name__}: {reason}): log "
                                   "offline with WANDB_MODE=offline (and `wandb sync` later), or use logger=csv"
                                   ) from None
    return logger


def log_report(folder: Path, group: str, tables: dict[str, Path], images: dict[str, Path],
               project: str = "sumrl") -> Path:
    """A report's tables (CSV files) and figures as one wandb run of job type "report" in the sweep's group, beside its
    runs; offline (in `folder`/wandb, for `wandb sync`) unless credentials are found. Returns the run's folder."""
    import pandas
    import wandb

    run = wandb.init(project=project, group=group, job_type="report", name=f"table4 {group}", dir=str(folder),
                     mode="offline" if not has_wandb_credentials() else None,
                     settings=wandb.Settings(silent=True, console="off"))
    run.log({**{name: wandb.Table(dataframe=pandas.read_csv(path)) for name, path in tables.items()},
             **{name: wandb.Image(str(path)) for name, path in images.items() if path.exists()}})
    run.finish()
    return Path(run.dir).parent


class WandbUnreachable(ConnectionError):
    """wandb credentials were found, but its server could not start the run."""


def run_id(save_dir: str) -> str:
    """The wandb run id of the run in `save_dir`, made on its first start: a resume logs to the same run."""
    path = Path(save_dir) / "wandb_id.txt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, uuid.uuid4().hex[:12] + "\n")
    return path.read_text().strip()


class FinishWandbRun(Callback):
    """Hydra callback (conf/train.yaml): ends the job's wandb run when the job ends, failed or not, so that the next
    job of a sweep starts a run of its own (Lightning would reuse the open one, merging the jobs)."""

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        wandb = sys.modules.get("wandb")  # imported only by a run that logs to wandb
        if wandb is not None and wandb.run is not None:
            wandb.finish(exit_code=0 if job_return.status == JobStatus.COMPLETED else 1)


class OmitLines(logging.Filter):
    """Drops log lines that start with `start` (conf/train.yaml, `hydra.hydra_logging`): the joblib launcher prints
    its whole `Joblib.Parallel(...)` call before each batch of a side-by-side sweep, nothing a user acts on."""

    def __init__(self, start: str):
        super().__init__()
        self.start = start

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.start)
