"""Callbacks that make a run's evidence visible: every validation recorded, drawn, and summed up in one line."""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Sequence

import pytorch_lightning as pl
from pytorch_lightning.callbacks import TQDMProgressBar
from pytorch_lightning.loggers import WandbLogger

from models.text.records import atomic_write, write_text
from trainer.tables import write_csv

log = logging.getLogger(__name__)

# What the decodes were like at the start and at the best step, in the summary line: a gain in the test metric beside
# greedy decodes that stopped repeating is what the test's trigram blocking already gives
DECODES = {"val/beam_length": "beam length", "val/length": "greedy length",
           "val/repeated_trigrams": "greedy repeated trigrams", "val/rouge_l": "greedy ROUGE-L",
           "val/reward": "greedy reward", "val/lead3_copy": "greedy lead-3 copy"}
PANELS = {"val/reward": "val reward", "val/loss": "val loss", "val/rouge_l": "val ROUGE-L",
          "val/length": "val length (tokens)", "val/repeated_trigrams": "val repeated trigrams",
          "val/test_metric": "val test metric (beam, no penalty)", "val/beam_length": "val beam length (tokens)",
          "val/lead3_copy": "val trigrams copied from lead-3"}
# beside the reward (or loss) panel, where a run logged them
SUMMARY_PANELS = ("val/test_metric", "val/beam_length", "val/rouge_l", "val/length", "val/repeated_trigrams",
                  "val/lead3_copy")


class ValidationCurve(pl.Callback):
    """Records each validation's `val/*` means with its optimizer step and the training seconds before it.
    When fitting ends (rank 0) it writes `val_curve.csv` and `val_curve.png` to `output_dir`, and logs and
    prints where the monitored metric started and its best value. Its points travel in checkpoints, so a
    resumed run keeps its start. `panels`: the metrics drawn beside the reward (or loss); `caption`: the figure's
    title (what varies between machines: the seed and the thread count)."""

    def __init__(self, monitor: str, mode: str, output_dir: str, panels: Sequence[str] = SUMMARY_PANELS,
                 caption: str | None = None):
        if mode not in ("min", "max"):
            raise ValueError(f"ValidationCurve: mode must be 'min' or 'max', got {mode!r}")
        self.monitor, self.mode, self.output_dir, self.panels = monitor, mode, Path(output_dir), tuple(panels)
        self.caption = caption
        self.points: list[dict[str, float]] = []
        self._train_start: float | None = None  # None: not fitting yet (a validation before training is at 0 s)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # a resumed run counts on from its last recorded point
        self._train_start = time.perf_counter() - (self.points[-1]["seconds"] if self.points else 0.0)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        values = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        if values:
            seconds = 0.0 if self._train_start is None else time.perf_counter() - self._train_start
            self.points.append({"step": trainer.global_step, "seconds": round(seconds, 2), **values})
            if trainer.is_global_zero:  # progress in one line, where runs side by side have no progress bars
                log.info(self.progress(trainer.max_steps))

    @property
    def name(self) -> str:
        """The run as the console names it: its folder and the one above (a sweep's seed_<s>/<reward>)."""
        return "/".join(self.output_dir.parts[-2:])

    def progress(self, max_steps: int) -> str:
        """The latest validation in a line: the run, its step (of `max_steps`, where set), the minutes since training
        started and the values of the monitor and the panels."""
        point = self.points[-1]
        minutes, seconds = divmod(round(point["seconds"]), 60)
        shown = [k for k in dict.fromkeys((self.monitor, *self.panels)) if k in point]
        return (f"{self.name}, step {point['step']}"
                + (f" of {max_steps}" if max_steps > 0 else "") + f" ({minutes}:{seconds:02d}): "
                + ", ".join(f"{k} {point[k]:.4g}" for k in shown))

    def state_dict(self) -> dict:
        return {"points": self.points}

    def load_state_dict(self, state_dict: dict) -> None:
        self.points = list(state_dict["points"])

    def summary(self) -> str:
        """`<monitor> <first> at step <s> → best <b> at step <n> (Δ <b − first>)`, then the `DECODES` at both steps."""
        seen = [p for p in self.points if self.monitor in p]
        if not seen:
            return f"{self.monitor}: never validated"
        first = seen[0]
        pick = max if self.mode == "max" else min
        best = pick(seen, key=lambda p: p[self.monitor])
        decodes = [f"{label} {first[key]:.4g} → {best[key]:.4g}" for key, label in DECODES.items()
                   if key != self.monitor and key in first and key in best]
        return (f"{self.monitor} {first[self.monitor]:.4f} at step {first['step']} → best {best[self.monitor]:.4f} "
                f"at step {best['step']} (Δ {best[self.monitor] - first[self.monitor]:+.4f}, "
                f"{len(seen)} validations)" + (f"; {', '.join(decodes)}" if decodes else ""))

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero or not self.points:
            return
        line = self.summary()
        log.info("%s: %s", self.name, line)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        try:  # records of the curve: a full disk costs them (said once), not the run, whose checkpoints are saved
            write_text(self.output_dir / "val_summary.txt", line + "\n")
            self.write_csv(self.output_dir / "val_curve.csv")
            plot_curves({self.output_dir.name: self.points}, self.output_dir / "val_curve.png", self.panels,
                        self.caption)
        except OSError as error:
            log.warning("could not write the validation curve's files in %s (%s): the curve is in the run's logs/",
                        self.output_dir, error.strerror or error)
            return
        for logger in trainer.loggers:  # the figure beside the run's own curves
            if isinstance(logger, WandbLogger):
                logger.log_image("val_curve", [str(self.output_dir / "val_curve.png")])

    def write_csv(self, path: Path) -> None:
        keys = ["step", "seconds"] + sorted({k for p in self.points for k in p} - {"step", "seconds"})
        write_csv(path, keys, self.points)


def plot_curves(curves: dict[str, list[dict[str, float]]], path: Path, panels: Sequence[str] = SUMMARY_PANELS,
                title: str | None = None) -> None:
    """One row of panels per run: its reward (or, for MLE, its loss), then `panels` (by default ROUGE-L, length
    and repeated trigrams of greedy validation decodes) against the optimizer step, the first value dashed."""
    from matplotlib.figure import Figure

    panels = [key for key in panels if any(key in p for points in curves.values() for p in points)]
    # A bare Figure draws with Agg, without pyplot's global state or backend switch (as table4's figure does).
    fig = Figure(figsize=(3.5 * (1 + len(panels)), 2.6 * len(curves)), layout="tight")
    axes = fig.subplots(len(curves), 1 + len(panels), squeeze=False)
    for row, (name, points) in zip(axes, curves.items()):
        main = "val/reward" if any("val/reward" in p for p in points) else "val/loss"
        for ax, key in zip(row, [main, *panels]):
            xy = [(p["step"], p[key]) for p in points if key in p]
            if xy:
                ax.plot(*zip(*xy), marker="o", markersize=3)
                ax.axhline(xy[0][1], color="grey", linewidth=0.8, linestyle="--")  # where the run started
            else:  # another run logs it (an MLE run has no test metric): say so rather than draw empty axes
                ax.text(0.5, 0.5, "not logged by this run", ha="center", va="center", fontsize=8, color="grey",
                        transform=ax.transAxes)
                ax.set_xticks([])
                ax.set_yticks([])
            ax.set_title(PANELS.get(key, key.replace('/', ' ').replace('_', ' ')), fontsize=9)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
        row[0].set_xlabel("optimizer step", fontsize=8)
        row[0].set_ylabel(name, fontsize=9, fontweight="bold")  # the run, once a row: long names overran the titles
    if title:
        fig.suptitle(title, fontsize=10)
    atomic_write(path, lambda partial: fig.savefig(partial, dpi=100, format="png"))


class StopWhenDecodesEnd(pl.Callback):
    """Ends a stage at its first validation from `min_steps` on where the greedy decodes' share of repeated trigrams
    (`val/repeated_trigrams`) is below `repeats_below`; until then the stage trains on, up to its `steps`. An MLE
    start whose decodes still loop on a phrase has not learned to stop, and RL then spends its steps unlearning the
    loop that the test's trigram blocking already hides (docs/RESULTS.md, "The demo over seeds"). A start that ends
    its decodes by `min_steps` stops there, as a fixed stage of `min_steps` would. `repeats_below` None: inert.
    The step it ended at is checkpointed: a resume of an ended stage (a continued sweep, a test killed) trains no
    further, as Lightning's own `should_stop` is not saved."""

    def __init__(self, min_steps: int | None = None, repeats_below: float | None = None):
        if repeats_below is not None and not 0 < repeats_below <= 1:
            raise ValueError(f"stages.<stage>.repeats_below must be in (0, 1], got {repeats_below}")
        self.min_steps, self.repeats_below = min_steps or 0, repeats_below
        self.ended_at: int | None = None

    def state_dict(self) -> dict[str, int | None]:
        return {"ended_at": self.ended_at}

    def load_state_dict(self, state_dict: dict[str, int | None]) -> None:
        self.ended_at = state_dict.get("ended_at")

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.ended_at is not None:
            trainer.should_stop = True
            log.info("the stage ended at step %d (its decodes stopped repeating): it trains no further",
                     self.ended_at)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        repeats = trainer.callback_metrics.get("val/repeated_trigrams")
        if (self.repeats_below is None or trainer.sanity_checking or repeats is None
                or trainer.global_step < self.min_steps):
            return
        if float(repeats) < self.repeats_below:
            trainer.should_stop, self.ended_at = True, trainer.global_step
            log.info("step %d: greedy decodes repeat %.3g of their trigrams, below %g: the stage ends",
                     trainer.global_step, float(repeats), self.repeats_below)


class StepProgressBar(TQDMProgressBar):
    """Lightning's bar, counting optimizer steps toward the stage's `trainer.max_steps` across epochs and resumes
    ("step 120/2500"), where Lightning counts each epoch's batches ("20/?" after a resume). A run without a step
    limit keeps Lightning's epoch bar."""

    def on_train_epoch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.max_steps <= 0:
            return super().on_train_epoch_start(trainer, *args)
        if self._leave:
            self.train_progress_bar = self.init_train_tqdm()
        bar = self.train_progress_bar
        bar.set_description("step", refresh=False)
        bar.reset(total=trainer.max_steps)
        bar.initial = trainer.global_step  # its rate counts this start's steps only
        show(bar, trainer.global_step)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if trainer.max_steps <= 0:
            return super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if self._should_update(trainer.global_step, trainer.max_steps):
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=False)
            show(self.train_progress_bar, trainer.global_step)


def show(bar: Any, steps: int) -> None:
    """A tqdm bar at `steps` done."""
    if not bar.disable:
        bar.n = steps
        bar.refresh()
