"""A run's folder and a sweep's: fresh for a new run, its own for a resume, locked while in use, checked before Hydra
writes there; the settings a run was started with, read back so that its folder alone resumes it; and the resolvers
the run's folder names use (conf/train.yaml)."""
from __future__ import annotations

import fcntl
import os
import sys
import tempfile
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Iterator

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf


class SettingsError(ValueError):
    """A setting that cannot work, refused before training starts (`trainer.settings` holds the checks; the class is
    here, below them, so that the command line's entry imports neither torch nor Lightning)."""


def run_dir_of(ckpt_path: str) -> Path:
    """`<run>/checkpoints/<name>.ckpt` → `<run>`."""
    return Path(ckpt_path).expanduser().resolve().parent.parent


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


def holds_a_run(folder: Path) -> bool:
    """A folder holds a run once it has a checkpoint to resume or test results; one stopped before either is reused."""
    return (folder / "checkpoints" / "last.ckpt").exists() or (folder / "results.json").exists()


def check_run_dir(cfg: DictConfig) -> None:
    """A new run gets a fresh directory (a second sweep into the same folder would start from the first sweep's
    MLE model); a resume continues its own directory, with the settings it was started with."""
    from pytorch_lightning.utilities import rank_zero_only  # Lightning: not for the entry's --help
    out = Path(cfg.output_dir).expanduser().resolve()
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
                            "folder of its own, or continue that one once it has ended (resume_if_exists=true)"
                            ) from None
    SWEEP_LOCKS[folder] = handle
    return handle


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
