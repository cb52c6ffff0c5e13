"""Table 4's reports: the markdown of the differences and the diagonal, the greedy decodes beside the beam, the CSV,
the figure of differences, the validation curves and the example articles."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from evaluation.comparisons import (EXTRAPOLATED, LEVEL, Comparison, best_row, compare_rows, format_interval,
                                    interval_fields, starred)
from evaluation.runs import Run, has_greedy, read_summaries
from evaluation.scoring import row_means, score_run
from evaluation.significance import Interval
from models.text.records import csv_rows
from trainer.callbacks import plot_curves
from trainer.evaluate import SHAPE_KEYS, mean_shape, results_table
from trainer.tables import markdown_table, write_csv


SHAPE_HEADERS = {"tokens": "tokens", "repeated_trigrams": "repeated trigrams"}


def significance_report(results: dict[str, dict[str, float]], comparisons: dict[str, dict[str, Comparison]],
                        baseline: str, own: dict[str, str], headers: dict[str, str], seeds: int, resamples: int,
                        seed: int, control: tuple[str | None, dict[str, Interval]] = (None, {})) -> str:
    """Markdown: every row's difference from the baseline per metric, the same at equal length, then each reward row
    on its own metric, with whether it is the best row there, its gain at equal length and beside the control row
    (`compare_with_control`) and, over several seeds, how many of them are significant on their own."""
    intervals = {row: {m: c.pooled for m, c in cells.items()} for row, cells in comparisons.items()}
    equal = {row: {m: c for m, c in cells.items() if c.equal_length} for row, cells in comparisons.items()}
    pooled = f"; {seeds} seeds pooled (two-level bootstrap: seeds, then articles)" if seeds > 1 else ""
    lines = [f"Difference from {baseline}:", "", results_table(intervals, headers, cell=starred), "",
             f"paired bootstrap over {results[baseline]['n']:,} test articles, {resamples:,} resamples, "
             f"seed {seed}, {LEVEL:.0%} percentile intervals{pooled}; * = interval excludes 0"]
    if any(equal.values()):
        lines += ["", f"Difference from {baseline} at equal length (the intercept of each seed's per-article "
                  "regression of the difference on the difference in tokens: what the row gains where its summary "
                  "is as long as the baseline's; same resamples):", "",
                  results_table(equal, headers, cell=Comparison.equal_length_cell)]
        if any(c.extrapolated for cells in equal.values() for c in cells.values()):
            lines += ["", f"† fewer than {EXTRAPOLATED:.0%} of the articles' summaries are as long as the baseline's "
                      "or shorter (or as long or longer): equal length lies outside the row's lengths, and its value "
                      "is an extrapolation of the line"]
    control_row, beside_control = control
    diagonal = []
    for row, metric in own.items():
        if metric not in comparisons.get(row, {}):
            continue
        comparison = comparisons[row][metric]
        best = best_row(results, metric, row)
        line = (f"- {row} on {headers.get(metric, metric)}: {results[baseline][metric]:.2f} → "
                f"{results[row][metric]:.2f} ({format_interval(comparison.pooled)}) "
                + ("significant" if comparison.pooled.significant else "not significant")
                + ("; the best row there" if best == row else f"; {best} is higher"))
        if comparison.equal_length:
            line += f"; at equal length {comparison.equal_length_cell()}"
        if row in beside_control:
            line += f"; beside the control ({control_row}) {starred(beside_control[row])}"
        if seeds > 1:
            line += f"; {comparison.significant_seeds} of {len(comparison.per_seed)} seeds significant: " + ", ".join(
                f"seed {s} {format_interval(iv)}{'*' if iv.significant else ''}"
                for s, iv in comparison.per_seed.items())
        diagonal.append(line)
    if diagonal:
        lines += ["", "Each reward on its own metric:", "", *diagonal]
    if control_row:
        lines += ["", f"Control: {control_row} pays for length alone; its differences are what length buys."]
    return "\n".join(lines)


def greedy_report(rows: dict[str, list[Run]], pairs: dict[Path, Run], metrics: dict, beam: dict[str, dict],
                  own: dict[str, str], headers: dict[str, str], resamples: int, seed: int
                  ) -> tuple[str, dict[str, dict[str, float]], dict[str, dict[str, Comparison]]]:
    """Markdown: every row's greedy decodes (no trigram blocking, no minimum length) scored as its beam is, and each
    reward row's difference from the baseline on its own metric under both decoders. Where the greedy gain is large
    and the beam's small, what the reward taught is what the test's rules already do (stop repeating). Empty where
    a run's test kept no greedy decodes."""
    runs = [run for row_runs in rows.values() for run in row_runs]
    if not all(has_greedy(run) for run in runs):
        return "", {}, {}
    means, scores, beam_shape = {}, {}, {}
    for run in runs:
        means[run.path], scores[run.path] = score_run(run, metrics, "greedy")
        beam_shape[run.path] = mean_shape([{key: row[key] for key in SHAPE_KEYS} for row in read_summaries(run.path)])
    results = {row: row_means([means[run.path] for run in row_runs]) for row, row_runs in rows.items()}
    keys = list(dict.fromkeys([*own.values(), *SHAPE_KEYS]))
    comparisons = compare_rows(rows, pairs, scores, keys, resamples, seed)
    shown = {row: {f"beam {key}": float(np.mean([beam_shape[run.path][key] for run in row_runs])) for key in SHAPE_KEYS}
             | {k: v for k, v in results[row].items() if k not in ("n", "seeds")} for row, row_runs in rows.items()}
    table = results_table(shown, {f"beam {key}": f"beam {SHAPE_HEADERS[key]}" for key in SHAPE_KEYS}
                          | {key: f"greedy {SHAPE_HEADERS[key]}" for key in SHAPE_KEYS}
                          | {key: f"greedy {header}" for key, header in headers.items()})
    lines = ["The same models' greedy decodes (no trigram blocking, no minimum length) beside the test's beam:", "",
             table, "", "Each reward on its own metric, greedy against beam (difference from the baseline):", ""]
    for row, metric in own.items():
        if metric in comparisons.get(row, {}) and metric in beam.get(row, {}):
            greedy, test = comparisons[row][metric], beam[row][metric]
            shape = comparisons[row]
            lines.append(f"- {row} on {headers.get(metric, metric)}: greedy {format_interval(greedy.pooled)}"
                         f"{'*' if greedy.pooled.significant else ''}, beam {format_interval(test.pooled)}"
                         f"{'*' if test.pooled.significant else ''}; greedy tokens "
                         f"{format_interval(shape['tokens'].pooled)}, repeated trigrams "
                         f"{format_interval(shape['repeated_trigrams'].pooled)}")
    return "\n".join(lines), results, comparisons


def write_results_csv(path: Path, results: dict[str, dict[str, float]],
                      comparisons: dict[str, dict[str, Comparison]]) -> None:
    """One line per model and metric (the pooled interval, and at equal length); the interval columns stay empty for
    the baseline."""
    def fields(model: str, metric: str) -> dict[str, float | bool]:
        comparison = comparisons.get(model, {}).get(metric)
        if comparison is None:
            return {}
        equal = comparison.equal_length
        return interval_fields(comparison.pooled) | ({f"equal_length_{k}": v for k, v in interval_fields(equal).items()}
                                                     if equal else {})
    lines = [{"model": model, "metric": metric, "mean": mean, "n": means["n"], "seeds": means["seeds"],
              **fields(model, metric)}
             for model, means in results.items() for metric, mean in means.items() if metric not in ("n", "seeds")]
    equal_length = [f"equal_length_{key}" for key in ("delta", "low", "high", "significant")]
    write_csv(path, ["model", "metric", "mean", "delta", "low", "high", "significant", *equal_length, "n", "seeds"],
              lines)


def plot_differences(path: Path, comparisons: dict[str, dict[str, Comparison]], baseline: str,
                     headers: dict[str, str], caption: str) -> None:
    """One panel per metric, two error bars per row, the difference (blue) and at equal length (orange, below it,
    unless extrapolated): filled where the interval excludes 0, hollow where not."""
    rows = list(comparisons)
    metrics = list(dict.fromkeys(metric for cells in comparisons.values() for metric in cells))  # a row may lack one
    ncols = min(len(metrics), 4)
    nrows = -(-len(metrics) // ncols)
    # A bare Figure draws with Agg, without pyplot's global state or a GUI backend.
    fig = Figure(figsize=(3.6 * ncols, nrows * (1.2 + 0.45 * len(rows))), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharey=True, squeeze=False).ravel()
    for ax, metric in zip(axes, metrics):
        for y, row in enumerate(rows):
            if (comparison := comparisons[row].get(metric)) is None:
                continue
            equal = None if comparison.extrapolated else comparison.equal_length  # off the scale: in the table only
            for offset, color, interval in ((0.0, "C0", comparison.pooled), (0.25, "C1", equal)):
                if interval is not None:
                    ax.errorbar(interval.mean, y + offset, capsize=3, fmt="o", color=color,
                                xerr=[[max(interval.mean - interval.low, 0)], [max(interval.high - interval.mean, 0)]],
                                markerfacecolor=color if interval.significant else "white")
        ax.axvline(0, color="grey", linewidth=0.8, zorder=0)
        ax.set_title(headers.get(metric, metric))
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    axes[0].set_yticks(range(len(rows)), rows)
    axes[0].invert_yaxis()  # once: the panels share the y axis, so each call would flip it back
    fig.suptitle(f"Difference from {baseline} (blue) and at equal length (orange), {LEVEL:.0%} paired bootstrap "
                 f"intervals (filled: interval excludes 0); {caption}")
    fig.savefig(path, dpi=120)


def validation_evidence(runs: dict[str, Path], out: Path, caption: str) -> str:
    """Each run's "start → best" line (`val_summary.txt`), and every run's validation curves in one figure."""
    curves, lines = {}, []
    for model, run in runs.items():
        if (run / "val_curve.csv").exists():
            curves[model] = [{k: float(v) for k, v in row.data.items() if v} for row in csv_rows(run / "val_curve.csv")]
        if (run / "val_summary.txt").exists():
            lines.append(f"- {model}: {(run / 'val_summary.txt').read_text(encoding='utf-8').strip()}")
    if curves:
        plot_curves(curves, out / "val_curves.png", title=caption)
    return "\n".join(["Validation (greedy, fixed sample), first → best:", "", *lines]) if lines else ""


def choose_examples(scores: dict[str, dict[str, dict[str, float]]], metrics: list[str], count: int, seed: int
                    ) -> list[str]:
    """The `count` articles (ids every row scored) whose `metrics` vary most across the rows (`scores`: row →
    article id → metric → score): each metric's max − min over the rows, in units of its standard deviation over
    every row's articles, summed over the metrics; ties in the order of a permutation seeded with `seed`."""
    ids = sorted(set.intersection(*(set(by_id) for by_id in scores.values())))
    order = random.Random(seed).sample(ids, len(ids))
    tiebreak = {article: i for i, article in enumerate(order)}
    spread = dict.fromkeys(ids, 0.0)
    for metric in metrics:
        values = {a: [s[a][metric] for s in scores.values() if s[a].get(metric) is not None] for a in ids}
        pooled = [v for vs in values.values() for v in vs]  # none where no row scored it (the control's tokens)
        scale = float(np.std(pooled)) if pooled else 0.0
        for article, vs in values.items():
            if vs and scale > 0:
                spread[article] += (max(vs) - min(vs)) / scale
    return sorted(ids, key=lambda a: (-spread[a], tiebreak[a]))[:count]


def table_cell(text: str) -> str:
    """A text as one markdown table cell: its lines joined, its pipes escaped."""
    return text.replace("\n", " ").replace("|", "\\|")


def examples_block(rows: dict[str, list[Run]], scores: dict[Path, dict], headers: dict[str, str], count: int,
                   seed: int) -> str:
    """Markdown: for `count` test articles (`choose_examples`, on each row's lowest seed's run), the reference and
    every row's summary, each with its own metric's score (rows without one: every row's own metric)."""
    runs = {row: row_runs[0] for row, row_runs in rows.items()}
    own = {row: run.test_metric for row, run in runs.items() if run.test_metric}
    metrics = list(dict.fromkeys(own.values())) or ["rougeL"]
    chosen = choose_examples({row: scores[run.path] for row, run in runs.items()}, metrics, count, seed)
    texts = {row: {r["id"]: r for r in read_summaries(run.path)} for row, run in runs.items()}
    seeds = sorted({str(run.seed) for run in runs.values()})
    names = ", ".join(headers.get(m, m) for m in metrics)
    lines = [f"Examples: the {len(chosen)} test articles whose own metrics ({names}) vary most across the rows "
             "(each metric's max − min over the rows in units of its standard deviation, summed; ties by a "
             f"permutation seeded with --seed {seed}); seed {' and '.join(seeds)}'s runs (each row's lowest seed)."]
    for article in chosen:
        reference = next(iter(texts.values()))[article]["reference"]
        cells = [["reference", table_cell(reference), ""]]
        for row, run in runs.items():
            shown = [own[row]] if row in own else metrics
            score = ", ".join(f"{headers.get(m, m)} {scores[run.path][article][m]:.2f}" for m in shown
                              if scores[run.path][article].get(m) is not None)
            cells.append([row, table_cell(texts[row][article]["summary"]), score])
        lines += ["", f"Article {article}:", "", markdown_table(["", "summary", "score"], cells)]
    return "\n".join(lines)
