"""Aggregate run directories into Clark et al.'s Table 4 layout.

    python scripts/table4.py multirun/demo_grid            # the newest sweep under it
    python scripts/table4.py runs/a runs/b --metrics wms sms s_wms

Each run is a directory with `config.yaml` and `checkpoints/`. A run whose test split has not been
decoded yet is decoded now with beam search from its best checkpoint. Every run is then scored with the
same metrics (ROUGE from rouge-score; the mover's metrics with exact EMD), whatever it trained with.

Every other row is compared with the MLE row (or the run named by --baseline) article by article: a
paired bootstrap over the test articles gives each difference a 95% percentile interval. Writes table4.md
(printed too), table4.csv, table4.json and table4_diff.png.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from pathlib import Path

from matplotlib.figure import Figure
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rewards.scoring import compose_rewards  # noqa: E402
from trainer.callbacks import plot_curves  # noqa: E402
from trainer.evaluate import TABLE_COLUMNS, evaluate, results_table  # noqa: E402
from trainer.significance import Interval, compare_to_baseline  # noqa: E402
from trainer.vocab import split_at_sentence_ends  # noqa: E402

ROW_NAMES = {"mle": "MLE+Pgen (no reward)", "rouge_l": "Mixed w/ ROUGE-L", "wms": "Mixed w/ WMS",
             "sms": "Mixed w/ SMS", "s_wms": "Mixed w/ S+WMS", "qa_conf": "Mixed w/ QAconf",
             "qa_fscore": "Mixed w/ QAfscore", "qa_learned": "Mixed w/ QA learned", "qa_equally": "Mixed w/ QA equally"}
# Bottom-up copying (conf/experiment/bottom_up_sample_grid.yaml): runs named bottom_up_<reward>.
ROW_NAMES |= {f"bottom_up_{name}": "Bottom-up " + row.removeprefix("MLE+Pgen ")
              for name, row in list(ROW_NAMES.items())}
# Scialom et al.'s Table 2 (conf/experiment/scialom_table2*.yaml): runs named <reward>+<data>, one per data option.
for data in ("cnndm", "cnndm_sample"):
    ROW_NAMES[f"mle+{data}"] = ROW_NAMES["mle"]
    ROW_NAMES |= {f"qa_learned+{data}{suffix}": f"+QA learned{row}" for suffix, row in (
        ("", ""), ("_tldr", " + TL;DR"), ("_val", " + CNN-DM (VAL)"), ("_test", " + CNN-DM (TEST)"))}
# The metric each reward run optimised: Table 4's diagonal compares it with the MLE row's.
OWN_METRIC = {"rouge_l": "rougeL", "wms": "wms", "sms": "sms", "s_wms": "s_wms", "qa_conf": "qa_conf",
              "qa_fscore": "qa_fscore"}
OWN_METRIC |= {f"bottom_up_{name}": metric for name, metric in OWN_METRIC.items()}
STORED_METRICS = ("qa_conf", "qa_fscore")  # test-time scores of runs that had them as metrics
LEVEL = 0.95


def find_runs(paths: list[Path]) -> list[Path]:
    """Run directories under each path: the path itself, its children, or the newest sweep below it."""
    runs = []
    for path in paths:
        if (path / "config.yaml").exists():
            runs.append(path)
            continue
        children = sorted(p.parent for p in path.glob("*/config.yaml"))
        if not children:
            sweeps = sorted((p for p in path.iterdir() if p.is_dir() and any(p.glob("*/config.yaml"))),
                            key=lambda p: p.name)
            if not sweeps:
                raise SystemExit(f"table4: no run directories (with config.yaml) under {path}")
            print(f"table4: using the newest sweep {sweeps[-1]}", file=sys.stderr)
            children = sorted(p.parent for p in sweeps[-1].glob("*/config.yaml"))
        runs.extend(children)
    return runs


def decode_test_split(run: Path) -> None:
    """Decode the run's test split from its best checkpoint (writes summaries.jsonl, results.json)."""
    from trainer.train import run as train_run

    checkpoint = run / "checkpoints" / "best.ckpt"
    if not checkpoint.exists():
        raise SystemExit(f"table4: {run} has no checkpoints/best.ckpt")
    cfg = OmegaConf.load(run / "config.yaml")
    cfg.train, cfg.init_from, cfg.ckpt_path, cfg.output_dir, cfg.logger = False, str(checkpoint), None, str(run), None
    cfg.module.beam.beam_size = 5
    train_run(cfg)


def score_run(run: Path, metrics: dict) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """The run's means (and `n`), and its scores per article id. ROUGE and `metrics` are computed anew; the QA
    metrics, which read the article (not in summaries.jsonl), are taken as the run scored them at test time."""
    path = run / "summaries.jsonl"
    rows = [json.loads(line) for line in path.open(encoding="utf-8")]
    hyps = [split_at_sentence_ends(r["summary"].split()) for r in rows]
    refs = [[s.split() for s in r["reference"].split("\n")] for r in rows]
    means, per_example = evaluate(hyps, refs, metrics)
    for key in STORED_METRICS:
        stored = [r["scores"].get(key) for r in rows]
        if all(v is not None for v in stored):
            means[key] = sum(stored) / len(stored)
            for scores, value in zip(per_example, stored):
                scores[key] = value
    by_id = dict(zip((r["id"] for r in rows), per_example))
    if len(by_id) != len(rows):
        raise SystemExit(f"table4: {path} repeats article ids ({len(rows) - len(by_id)} duplicate rows)")
    return {"n": len(rows), **means}, by_id


def format_interval(interval: Interval) -> str:
    return f"{interval.mean:+.2f} [{interval.low:+.2f}, {interval.high:+.2f}]"


def significance_report(results: dict[str, dict[str, float]], intervals: dict[str, dict[str, Interval]],
                        baseline: str, resamples: int, seed: int) -> str:
    """Markdown: every row's difference from the baseline row per metric, then each reward row on its own metric."""
    table = results_table(intervals, cell=lambda iv: format_interval(iv) + ("*" if iv.significant else ""))
    lines = [f"Difference from {baseline}:", "", table, "",
             f"paired bootstrap over {results[baseline]['n']:,} test articles, {resamples:,} resamples, "
             f"seed {seed}, {LEVEL:.0%} percentile intervals; * = interval excludes 0"]
    diagonal = []
    for run_name, metric in OWN_METRIC.items():
        row = ROW_NAMES[run_name]
        if metric in intervals.get(row, {}):
            interval = intervals[row][metric]
            diagonal.append(f"- {row} on {TABLE_COLUMNS.get(metric, metric)}: {results[baseline][metric]:.2f} → "
                            f"{results[row][metric]:.2f} ({format_interval(interval)}) "
                            + ("significant" if interval.significant else "not significant"))
    if diagonal:
        lines += ["", "Each reward on its own metric:", "", *diagonal]
    return "\n".join(lines)


def interval_fields(interval: Interval) -> dict[str, float | bool]:
    return {"delta": interval.mean, "low": interval.low, "high": interval.high, "significant": interval.significant}


def write_csv(path: Path, results: dict[str, dict[str, float]], intervals: dict[str, dict[str, Interval]]) -> None:
    """One line per model and metric; the interval columns stay empty for MLE (or without intervals)."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, ["model", "metric", "mean", "delta", "low", "high", "significant", "n"])
        writer.writeheader()
        for model, means in results.items():
            for metric, mean in means.items():
                if metric != "n":
                    interval = intervals.get(model, {}).get(metric)
                    writer.writerow({"model": model, "metric": metric, "mean": mean, "n": means["n"],
                                     **(interval_fields(interval) if interval else {})})


def plot_differences(path: Path, intervals: dict[str, dict[str, Interval]], baseline: str) -> None:
    """One panel per metric, one error bar per row: filled where the interval excludes 0, hollow where not."""
    rows = list(intervals)
    metrics = list(intervals[rows[0]])
    ncols = min(len(metrics), 4)
    nrows = -(-len(metrics) // ncols)
    # A bare Figure draws with Agg, without pyplot's global state or a GUI backend.
    fig = Figure(figsize=(3.6 * ncols, nrows * (1.2 + 0.45 * len(rows))), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharey=True, squeeze=False).ravel()
    for ax, metric in zip(axes, metrics):
        for y, row in enumerate(rows):
            interval = intervals[row][metric]
            ax.errorbar(interval.mean, y, xerr=[[interval.mean - interval.low], [interval.high - interval.mean]],
                        fmt="o", color="C0", markerfacecolor="C0" if interval.significant else "white", capsize=3)
        ax.axvline(0, color="grey", linewidth=0.8, zorder=0)
        ax.set_title(TABLE_COLUMNS.get(metric, metric))
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    axes[0].set_yticks(range(len(rows)), rows)
    axes[0].invert_yaxis()  # once: the panels share the y axis, so each call would flip it back
    fig.suptitle(f"Difference from {baseline}, {LEVEL:.0%} paired bootstrap intervals "
                 "(filled: interval excludes 0)")
    fig.savefig(path, dpi=120)


def validation_evidence(runs: dict[str, Path], out: Path) -> str:
    """Each run's "start → best" line (`val_summary.txt`), and every run's validation curves in one figure."""
    curves, lines = {}, []
    for model, run in runs.items():
        if (run / "val_curve.csv").exists():
            rows = csv.DictReader((run / "val_curve.csv").open(encoding="utf-8"))
            curves[model] = [{k: float(v) for k, v in row.items() if v} for row in rows]
        if (run / "val_summary.txt").exists():
            lines.append(f"- {model}: {(run / 'val_summary.txt').read_text(encoding='utf-8').strip()}")
    if curves:
        plot_curves(curves, out / "val_curves.png")
    return "\n".join(["Validation (greedy, fixed sample), first → best:", "", *lines]) if lines else ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="run directories or sweep folders")
    parser.add_argument("--metrics", nargs="*", default=["wms", "sms", "s_wms"],
                        help="reward configs (conf/reward/) used as test-time metrics")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="overrides of the metric configs, e.g. wms.embeddings.path=glove.840B.300d.txt")
    parser.add_argument("--out", type=Path, help="where to write table4.md/csv/json/png (default: the folder "
                                                  "holding all the runs, e.g. the sweep)")
    parser.add_argument("--baseline", default="mle", help="the run name of the row the others are compared with "
                                                          "(bottom_up_mle for the bottom-up grid)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples per interval")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap's resampling")
    args = parser.parse_args(argv)

    metrics = compose_rewards(args.metrics, args.set)
    scored, run_dirs = {}, {}
    runs = find_runs(args.paths)
    for run in runs:
        if not (run / "summaries.jsonl").exists():
            decode_test_split(run)
        name = OmegaConf.load(run / "config.yaml").get("run_name") or run.name
        scored[ROW_NAMES.get(name, name)] = score_run(run, metrics)
        run_dirs[ROW_NAMES.get(name, name)] = run
    order = list(ROW_NAMES.values())
    scored = dict(sorted(scored.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
    results = {model: means for model, (means, _) in scored.items()}
    report = results_table(results)
    intervals = {}
    baseline = ROW_NAMES.get(args.baseline, args.baseline)
    if baseline in results and len(results) > 1:
        try:
            intervals = compare_to_baseline({model: by_id for model, (_, by_id) in scored.items()}, baseline,
                                            [k for k in results[baseline] if k != "n"], args.resamples, args.seed,
                                            LEVEL)
        except ValueError as error:
            raise SystemExit(f"table4: {error}") from error
        report += "\n\n" + significance_report(results, intervals, baseline, args.resamples, args.seed)
    else:
        print(f"table4: no intervals were computed (they need the {baseline} run, run_name {args.baseline}, "
              "and at least one other)", file=sys.stderr)
    out = args.out or Path(os.path.commonpath([run.resolve() for run in runs]))
    out.mkdir(parents=True, exist_ok=True)
    evidence = validation_evidence({model: run_dirs[model] for model in scored}, out)
    report += "\n\n" + evidence if evidence else ""
    print(report)
    (out / "table4.md").write_text(report + "\n")
    write_csv(out / "table4.csv", results, intervals)
    table = {model: dict(means) for model, means in results.items()}
    for model, cells in intervals.items():
        table[model]["vs_mle"] = {metric: interval_fields(interval) for metric, interval in cells.items()}
    (out / "table4.json").write_text(json.dumps(table, indent=2) + "\n")
    if intervals:
        plot_differences(out / "table4_diff.png", intervals, baseline)


if __name__ == "__main__":
    main()
