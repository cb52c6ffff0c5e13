"""Table 4 of a set of runs: every run scored anew, each row compared with its baseline (plain, at equal length, beside
the control), the greedy decodes beside the beam, the validation curves and example articles; written as table4.md,
.csv, .json and table4_diff.png."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from evaluation.comparisons import Comparison, best_row, compare_rows, compare_with_control, interval_fields
from evaluation.reports import (SHAPE_HEADERS, examples_block, greedy_report, plot_differences, significance_report,
                                validation_evidence, write_results_csv)
from evaluation.runs import EvaluationRefused, Run, baseline_row, runs_caption
from evaluation.scoring import lead3_row, row_means, score_run
from models.text.records import write_text
from rewards.base import Reward
from trainer.evaluate import columns, results_table


@dataclass
class Table4:
    """What table4 reports: the markdown (`report`), the rows' means as shown (Lead-3 first), each row's comparisons
    with its baseline, and everything as `table4.json` holds it."""

    report: str
    shown: dict[str, dict[str, float]]
    comparisons: dict[str, dict[str, Comparison]]
    record: dict
    baseline: str
    headers: dict[str, str]
    caption: str


def make_table4(runs: list[Run], pairs: dict[Path, Run], metrics: dict[str, Reward], baseline_name: str,
                resamples: int, seed: int, examples: int, out: Path) -> Table4:
    """Scores every run with `metrics` (and ROUGE), compares each row with its runs' baselines (`pairs`), and
    draws the validation curves into `out`."""
    means, scores = {}, {}
    for run in runs:
        means[run.path], scores[run.path] = score_run(run, metrics)
    headers = columns(metrics)
    for run in runs:
        headers |= {key: column for key, column in run.columns.items() if key not in headers}
    headers["tokens"] = SHAPE_HEADERS["tokens"]
    baseline = baseline_row(runs, baseline_name)
    order = list(headers)  # the baseline, then the reward rows in the order of their test metrics' columns
    rows: dict[str, list[Run]] = {}
    for run in sorted(runs, key=lambda r: (r.row != baseline, order.index(r.test_metric) if r.test_metric in order
                                           else len(order), r.row, -1 if r.seed is None else r.seed)):
        rows.setdefault(run.row, []).append(run)
    own = {row: row_runs[0].test_metric for row, row_runs in rows.items() if row_runs[0].test_metric}
    results = {row: row_means([means[run.path] for run in row_runs]) for row, row_runs in rows.items()}
    seeds = max(len(row_runs) for row_runs in rows.values())
    lead = lead3_row(next(run for run in runs if run.row == baseline), metrics) if baseline in rows else None
    shown = {"Lead-3": lead, **results} if lead else results  # placing the models; compared with none of them
    report = results_table({row: {k: v for k, v in r.items() if k != "seeds"} for row, r in shown.items()}, headers)
    if seeds > 1:
        report += f"\n\nmeans over each row's seeds ({seeds} at most)"
    comparisons = {}
    if pairs:
        try:
            comparisons = compare_rows(rows, pairs, scores, [k for k in results[baseline] if k not in ("n", "seeds")],
                                       resamples, seed)
        except ValueError as error:
            raise EvaluationRefused(str(error)) from error
        control = compare_with_control(rows, scores, own, resamples, seed)
        report += "\n\n" + significance_report(results, comparisons, baseline, own, headers, seeds, resamples,
                                                 seed, control)
        greedy, greedy_results, greedy_comparisons = greedy_report(rows, pairs, metrics, comparisons, own, headers,
                                                                   resamples, seed)
        report += "\n\n" + greedy if greedy else ""
    else:
        greedy_results, greedy_comparisons, control = {}, {}, (None, {})
        print(f"table4: no intervals were computed (they need the {baseline} run, run_name {baseline_name}, "
              "and at least one other)", file=sys.stderr)
    labelled = {(run.row if len(row_runs) == 1 else f"{run.row} (seed {run.seed})"): run.path
                for row_runs in rows.values() for run in row_runs}
    evidence = validation_evidence(labelled, out, runs_caption(runs))
    report += "\n\n" + evidence if evidence else ""
    if examples > 0:
        report += "\n\n" + examples_block(rows, scores, headers, examples, seed)
    record = json_record(rows, results, shown, comparisons, greedy_results, greedy_comparisons, own, control)
    return Table4(report, shown, comparisons, record, baseline, headers, runs_caption(runs))


def json_record(rows: dict[str, list[Run]], results: dict[str, dict[str, float]], shown: dict[str, dict[str, float]],
                comparisons: dict[str, dict[str, Comparison]], greedy_results: dict[str, dict[str, float]],
                greedy_comparisons: dict[str, dict[str, Comparison]], own: dict[str, str],
                control: tuple[str | None, dict]) -> dict:
    """table4.json: each row's means, its intervals (pooled, at equal length, per seed; its greedy decodes'), the
    diagonal by run name, and the control row."""
    record = {model: dict(row) for model, row in shown.items()}
    for model, cells in comparisons.items():
        record[model]["vs_mle"] = {metric: interval_fields(c.pooled) for metric, c in cells.items()}
        record[model]["vs_mle_equal_length"] = {
            metric: interval_fields(c.equal_length) | {"extrapolated": c.extrapolated} for metric, c in cells.items()
            if c.equal_length}
        record[model]["vs_mle_per_seed"] = {str(s): {metric: interval_fields(c.per_seed[s]) for metric, c in
                                                     cells.items()} for s in next(iter(cells.values())).per_seed}
    for model, means_greedy in greedy_results.items():
        record[model]["greedy"] = dict(means_greedy)
        record[model]["greedy"]["vs_mle"] = {metric: interval_fields(c.pooled)
                                             for metric, c in greedy_comparisons.get(model, {}).items()}
    record["diagonal"] = {}  # each reward run on its own metric, by run name
    for row, metric in own.items():
        comparison = comparisons.get(row, {}).get(metric)
        if comparison:
            record["diagonal"][rows[row][0].run_name] = {
                "row": row, "metric": metric, **interval_fields(comparison.pooled), "seeds": len(comparison.per_seed),
                "seeds_significant": comparison.significant_seeds, "best_row": best_row(results, metric, row) == row,
                "equal_length": interval_fields(comparison.equal_length) if comparison.equal_length else None,
                "vs_control": interval_fields(control[1][row]) if row in control[1] else None}
    record["control"] = control[0]
    return record


def write_table4(table: Table4, out: Path) -> None:
    """table4.md, table4.csv, table4.json and (with comparisons) table4_diff.png in `out`."""
    write_text(out / "table4.md", table.report + "\n")
    write_results_csv(out / "table4.csv", table.shown, table.comparisons)
    write_text(out / "table4.json", json.dumps(table.record, indent=2) + "\n")
    if table.comparisons:
        plot_differences(out / "table4_diff.png", table.comparisons, table.baseline, table.headers, table.caption)
