"""Two sweeps of one grid, run by run: sweep B − sweep A on each run's own test metric, and their validation curves
against the examples seen (for a change that alters the batch size, the learning rate, the steps).

    python scripts/compare_sweeps.py --a runs/batch16 --b runs/batch32 --labels "batch 16" "batch 32" --out docs/b32

Runs pair by (run name, seed). Each pair is compared article by article on the run's test metric (`table4.py`
scores them the same way), with a paired bootstrap per seed and a two-level one (seeds, then articles) pooled over
the seeds. Writes compare.md (printed too) and compare_curves.png: each run name's validation test metric against
training examples seen (steps × batch size), A solid, B dashed, one colour per seed. Runs only in one sweep (the MLE
runs both started from, kept in A) are left out.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from omegaconf import OmegaConf

from models.text.records import csv_rows, write_text
from rewards.configs import compose_rewards
from scripts.cli import add_config_dir_argument, command
from evaluation.comparisons import LEVEL, format_interval
from evaluation.runs import Run, find_runs
from evaluation.scoring import score_run
from trainer.evaluate import TEST_ROUGE
from evaluation.significance import paired_bootstrap, paired_differences, pooled_bootstrap
from trainer.tables import markdown_table


def runs_by_key(folders: list[Path]) -> dict[tuple[str, int | None], Run]:
    runs = {}
    for path in find_runs(folders, prog="compare_sweeps"):
        run = Run.read(path)
        if (run.run_name, run.seed) in runs:
            raise SystemExit(f"compare_sweeps: two runs named {run.run_name!r} of seed {run.seed}: "
                             f"{runs[run.run_name, run.seed].path} and {path}")
        runs[run.run_name, run.seed] = run
    return runs


def examples_curve(run: Run) -> tuple[list[float], list[float]]:
    """(examples seen, validation test metric) at each validation of the run."""
    batch_size = OmegaConf.load(run.path / "config.yaml").data.batch_size
    rows = [row.data for row in csv_rows(run.path / "val_curve.csv")]
    return [float(r["step"]) * batch_size for r in rows], [float(r["val/test_metric"]) for r in rows]


def plot(pairs: dict[tuple[str, int | None], tuple[Run, Run]], labels: tuple[str, str], path: Path) -> None:
    names = sorted({name for name, _ in pairs})
    figure = Figure(figsize=(4.2 * len(names), 3.4))
    axes = figure.subplots(1, len(names), squeeze=False)[0]
    seeds = sorted({seed for _, seed in pairs}, key=lambda s: -1 if s is None else s)
    for ax, name in zip(axes, names):
        named = {seed: runs for (run_name, seed), runs in pairs.items() if run_name == name}
        for seed, runs in named.items():
            for run, style, label in zip(runs, ("-", "--"), labels):
                if (run.path / "val_curve.csv").exists():
                    ax.plot(*examples_curve(run), style, color=f"C{seeds.index(seed)}", label=f"{label}, seed {seed}")
        first = next(iter(named.values()))[0]
        ax.set(title=first.row, xlabel="training examples seen", ylabel=f"validation {first.test_metric}")
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))  # off the curves
    figure.suptitle(f"{labels[1]} (dashed) against {labels[0]} (solid)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a", nargs="+", type=Path, required=True,
                        help="the sweep compared against (or one folder per seed)")
    parser.add_argument("--b", nargs="+", type=Path, required=True)
    parser.add_argument("--labels", nargs=2, default=["A", "B"])
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides of the metric configs")
    add_config_dir_argument(parser)
    parser.add_argument("--out", type=Path, required=True, help="where to write compare.md and compare_curves.png")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap's resampling")
    args = parser.parse_args(argv)

    a_runs, b_runs = runs_by_key(args.a), runs_by_key(args.b)
    same = sorted(str(run.path) for run in a_runs.values()
                  if run.path.resolve() in {other.path.resolve() for other in b_runs.values()})
    if same:  # every difference would be +0.00
        raise SystemExit(f"compare_sweeps: --a and --b both give {same[0]}: compare two sweeps")
    pairs = {key: (a_runs[key], b_runs[key]) for key in sorted(a_runs.keys() & b_runs.keys(), key=str)
             if a_runs[key].test_metric}
    if not pairs:
        raise SystemExit("compare_sweeps: no run of --b has a namesake of the same seed in --a")
    metric_names = sorted({a.test_metric for a, _ in pairs.values()} - set(TEST_ROUGE))  # every test scores these
    metrics = compose_rewards(metric_names, args.set, args.config_dir)
    by_name: dict[str, list[tuple[int | None, float, float, np.ndarray]]] = {}  # seed, A's mean, B's mean, B − A
    for (name, seed), (a, b) in pairs.items():
        (a_mean, a_scores), (b_mean, b_scores) = score_run(a, metrics), score_run(b, metrics)
        metric = a.test_metric
        deltas = paired_differences(b_scores, a_scores, metric, str(b.path), str(a.path))
        by_name.setdefault(name, []).append((seed, a_mean[metric], b_mean[metric], deltas))
    table = []
    for name, seeds in by_name.items():
        row = next(a for (run_name, _), (a, _) in pairs.items() if run_name == name)
        pooled = pooled_bootstrap([d for *_, d in seeds], args.resamples, args.seed, LEVEL)
        per_seed = [(seed, paired_bootstrap(d, args.resamples, args.seed, LEVEL)) for seed, *_, d in seeds]
        table.append([row.row, row.test_metric, str(len(seeds)), f"{np.mean([a for _, a, _, _ in seeds]):.2f}",
                      f"{np.mean([b for _, _, b, _ in seeds]):.2f}", format_interval(pooled) + "*" * pooled.significant,
                      "; ".join(f"{seed}: {format_interval(i)}{'*' * i.significant}" for seed, i in per_seed)])
    a_label, b_label = args.labels
    report = markdown_table(["row", "metric", "seeds", a_label, b_label, f"{b_label} − {a_label}, pooled",
                             "per seed"], table)
    report += (f"\n\nMeans over the seeds; {LEVEL:.0%} paired bootstrap intervals over the test articles "
               f"({args.resamples:,} resamples; pooled: seeds, then articles); * the interval excludes 0.")
    args.out.mkdir(parents=True, exist_ok=True)
    plot(pairs, (a_label, b_label), args.out / "compare_curves.png")
    report += f"\n\nValidation curves against the examples seen: {args.out / 'compare_curves.png'}"
    print(report)
    write_text(args.out / "compare.md", report + "\n")


cli = command(main)  # bad input is one line, not a traceback

if __name__ == "__main__":
    cli()
