"""Aggregate run directories into Clark et al.'s Table 4 layout.

    sumrl-table4 multirun/demo_grid            # the newest sweep under it
    sumrl-table4 runs/a runs/b --metrics wms sms s_wms

Each run is a directory with `config.yaml` and, once its test has run, `summaries.jsonl`. table4 only reads runs: a
run without test results is left out, with a line saying how to finish it. Every run is scored with the same metrics
(ROUGE from rouge-score; the mover's metrics with exact EMD), whatever it trained with.

Every other run is compared, article by article, with the MLE run (--baseline names another) that it started
from, as its config records (`lineage`); runs from before that record pair with the baseline of their seed. A
paired bootstrap over the test articles gives each difference a 95% percentile interval. Runs of one name with
several seeds (`-m ... seed=0,1,2`) form one row: its means are over the seeds, its interval resamples seeds, then
articles (a two-level bootstrap), and the diagonal says how many seeds are significant on their own. Every row shows
its summaries' mean length in tokens, and every difference its value at equal length (`at_equal_length`: the
intercept of the per-article regression of the difference on the length difference), from the same resamples; a
control row (the length-only reward, `Reward.control`) shows what length alone buys, and each reward's gain on its
own metric is also compared with it, seed by seed. Writes
table4.md (printed too), table4.csv, table4.json and table4_diff.png. `--examples N` adds N test articles, the
reference and every row's summary with its own metric's score (`choose_examples` says which articles).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from matplotlib.figure import Figure
from omegaconf import DictConfig, OmegaConf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from models.text.records import DataError, Row, csv_rows, jsonl_rows, write_text  # noqa: E402
from models.text.vocab import split_at_sentence_ends  # noqa: E402
from scripts.cli import (USER_ERRORS, add_config_dir_argument, command, compose_rewards,  # noqa: E402
                         instantiate_or_refuse, int_at_least, metrics_and_paths, positive_int)
from trainer.callbacks import plot_curves  # noqa: E402
from trainer.checkpoints import SELECTOR_STAGE  # noqa: E402
from trainer.evaluate import (ROWS, SHAPE_KEYS, columns, evaluate, mean_shape, results_table,  # noqa: E402
                              summary_shape, table_record)
from trainer.loggers import log_report, sweep_group  # noqa: E402
from trainer.significance import Interval, paired_bootstrap, paired_differences, pooled_bootstrap  # noqa: E402
from trainer.tables import markdown_table, write_csv  # noqa: E402
from trainer.train import SettingsError, check_writable  # noqa: E402

LEVEL = 0.95
EXTRAPOLATED = 0.05  # the share of articles below which equal length lies outside the row's length differences
SHAPE_HEADERS = {"tokens": "tokens", "repeated_trigrams": "repeated trigrams"}


@dataclass
class Run:
    """A run directory and what its config.yaml says of it: its row, seed and where its weights came from, and what
    its rewards say of the table (`trainer.evaluate.table_record`): its row label, the test metric its reward is
    judged on, the columns of its test metrics and which of them only its test could score."""

    path: Path
    run_name: str
    row: str
    seed: int | None = None
    run_id: str | None = None
    lineage: list[str] = field(default_factory=list)  # the run ids its weights descend from, oldest first
    init_from: str | None = None
    threads: int | None = None
    test_metric: str | None = None
    columns: dict[str, str] = field(default_factory=dict)
    stored: list[str] = field(default_factory=list)
    trained: bool = True  # false: a test of another run's weights (train=false init_from=...)
    stage: str | None = None
    control: bool = False  # its reward is a control (the length-only row), not a reward for content

    @classmethod
    def read(cls, path: Path) -> "Run":
        """The run of a folder; a config.yaml that is not a run's (edited, truncated) is a DataError naming it."""
        try:
            cfg = OmegaConf.load(path / "config.yaml")
            if not isinstance(cfg, DictConfig):
                raise ValueError(f"a YAML {type(cfg).__name__}, not a mapping")
            record = cfg.get("table") or recorded_table(cfg)
            return cls(path, str(cfg.get("run_name") or path.name), str(record["row"]), cfg.get("seed"),
                       cfg.get("run_id"), list(cfg.get("lineage") or []), cfg.get("init_from"), cfg.get("threads"),
                       record["test_metric"], dict(record["columns"]), list(record["stored"]), cfg.get("train", True),
                       cfg.get("stage"), bool(record.get("control", False)))
        except Exception as error:  # whatever the file holds, one line naming it
            reason = " ".join(str(error).split())[:200]
            raise DataError(f"{path / 'config.yaml'}: not a run's config ({type(error).__name__}: {reason})") from None

    @property
    def weights_id(self) -> str | None:
        """The id of the run whose weights this run tests: its own, or, for a test-only run, the run it re-tests (a
        baseline re-tested with another metric still pairs with the runs that started from it)."""
        return self.run_id if self.trained or not self.lineage else self.lineage[-1]


def recorded_table(cfg: DictConfig) -> dict:
    """The table record of a run from before runs kept one: made now from its reward and metric configs."""
    metrics = {key: instantiate_or_refuse(node) for key, node in (cfg.get("metrics") or {}).items()}
    reward = instantiate_or_refuse(cfg.reward) if cfg.get("reward") else None
    return table_record(reward, metrics, cfg.get("rows") or ROWS, (cfg.get("rl") or {}).get("length_neutral", 0.0))


def is_run(path: Path) -> bool:
    """A run folder: config.yaml at its top (Hydra's own records in .hydra/ are not runs)."""
    return (path / "config.yaml").is_file() and ".hydra" not in path.parts


def runs_below(path: Path) -> list[Path]:
    return sorted(p.parent for p in path.rglob("config.yaml") if is_run(p.parent))


def find_runs(paths: list[Path], prog: str = "table4") -> list[Path]:
    """Run directories under each path: the path itself, its child runs, a sweep's runs (every seed's), or the
    runs of the newest sweep below it. `prog` names the script in its messages."""
    runs = []
    for path in paths:
        if not path.is_dir():
            raise SystemExit(f"{prog}: {path} is not a directory (give run directories or sweep folders)")
        if is_run(path):
            runs.append(path)
            continue
        children = [p for p in sorted(path.iterdir()) if is_run(p)]
        if not children and (path / "multirun.yaml").exists():
            children = runs_below(path)
        if not children:
            sweeps = sorted((p for p in path.iterdir() if p.is_dir() and runs_below(p)), key=lambda p: p.name)
            if not sweeps:
                raise SystemExit(f"{prog}: no run directories (with config.yaml) under {path}")
            print(f"{prog}: using the newest sweep {sweeps[-1]}", file=sys.stderr)
            children = runs_below(sweeps[-1])
        runs.extend(children)
    return runs


def default_out(runs: list[Path]) -> Path:
    """The sweep that holds all the runs (the folder with Hydra's multirun.yaml), else their common folder."""
    common = Path(os.path.commonpath([run.resolve() for run in runs]))
    return next((p for p in [common, *common.parents] if (p / "multirun.yaml").exists()), common)


# What differs between seeds of one row without making them different runs: the seed, what follows from it (folders,
# ids, the starting checkpoint of that seed) and the thread count.
SEED_KEYS = {"seed", "shuffle_seed", "run_id", "lineage", "threads", "caption", "tags", "init_from", "mle_checkpoint",
             "ckpt_path", "output_dir", "dirpath", "save_dir", "default_root_dir"}


def flat_settings(path: Path) -> dict[str, object]:
    def flat(node: object, prefix: str) -> dict[str, object]:
        if isinstance(node, dict):
            return {k: v for key, value in node.items() for k, v in flat(value, f"{prefix}{key}.").items()}
        return {prefix[:-1]: node}
    return flat(OmegaConf.to_container(OmegaConf.load(path / "config.yaml")), "")


def check_seeds_differ_only(runs: list[Run]) -> None:
    """Seeds pooled into one row must be one run at other seeds: a row pooling another learning rate or step count
    would report its intervals as a seed effect."""
    first: dict[str, tuple[Run, dict[str, object]]] = {}
    for run in runs:
        if run.row not in first:
            first[run.row] = run, flat_settings(run.path)
            continue
        (other, a), b = first[run.row], flat_settings(run.path)
        differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k) and k.split(".")[-1] not in SEED_KEYS)
        if differ:
            raise SystemExit(f"table4: {run.row!r} would pool seeds {other.seed} and {run.seed}, whose settings differ "
                             f"in {', '.join(differ[:8])}{', …' if len(differ) > 8 else ''} ({other.path} and "
                             f"{run.path}): give table4 runs that differ in their seed only")


def check_decoded_alike(pairs: dict[Path, Run]) -> None:
    """A row and the baseline it is compared with must have been tested with one decoder (`module.beam`: beam size,
    maximum and minimum length, blocking): a difference that is partly the decoder's is refused, naming the keys."""
    for path, base in pairs.items():
        a, b = ({k: v for k, v in flat_settings(p).items() if k.startswith("module.beam.")} for p in (base.path, path))
        differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        if differ:
            raise SystemExit(f"table4: {path} was tested with another decoder than its baseline {base.path} "
                             f"({', '.join(f'{k}: {b.get(k)} against {a.get(k)}' for k in differ[:4])}): test both "
                             "with one decoder (train=false init_from=<checkpoint> module.beam...=...)")


def writable(out: Path) -> Path:
    """The --out folder, made now (`check_writable`, as a run's folder is): one that cannot be written would fail after
    all the scoring."""
    try:
        check_writable(out, "--out")
    except SettingsError as error:
        raise SystemExit(f"table4: {error}") from None
    return out


def baseline_row(runs: list[Run], baseline: str) -> str:
    """The row of the runs named `baseline` (a run name or a row; `mle`: also the MLE row of runs named otherwise)."""
    return next((run.row for run in runs if baseline in (run.run_name, run.row)), ROWS.get(baseline, baseline))


def pair_with_baselines(runs: list[Run], baseline: str) -> dict[Path, Run]:
    """Each non-baseline run's baseline run: the one it started from (its lineage), or, for runs that do not
    record one, the baseline run of its seed. Two runs of one name and seed are not seeds of one grid: refused."""
    seen: dict[tuple[str, int | None], Run] = {}
    for run in runs:
        other = seen.setdefault((run.row, run.seed), run)
        if other is not run:
            raise SystemExit(f"table4: {other.path} and {run.path} are both {run.row!r} with seed {run.seed}: "
                             "runs that share a row must be seeds of one grid; give table4 one of them")
    baseline = baseline_row(runs, baseline)
    bases = [run for run in runs if run.row == baseline]
    by_id = {run.weights_id: run for run in bases if run.weights_id}
    pairs = {}
    for run in runs:
        if run.row == baseline or not bases:
            continue
        if run.lineage:
            start = next((by_id[i] for i in reversed(run.lineage) if i in by_id), None)
            if start is None:
                raise SystemExit(f"table4: {run.path} descends from runs {', '.join(run.lineage)} (it started from "
                                 f"{run.init_from}), none of which is a {baseline} run given: add the run it started "
                                 "from")
        else:
            same_seed = [b for b in bases if b.seed == run.seed]
            if len(same_seed) != 1:
                raise SystemExit(f"table4: {run.path} records no starting run, and there is no {baseline} run of "
                                 f"its seed ({run.seed}) to compare it with")
            start = same_seed[0]
        pairs[run.path] = start
    return pairs


def tested(runs: list[Run]) -> list[Run]:
    """The summarizer runs whose test has written summaries.jsonl. Each other one is named with how to finish it:
    decoding it here would rewrite its records with settings that are not its own."""
    done = []
    for run in runs:
        if run.stage == SELECTOR_STAGE:
            print(f"table4: leaving out {run.path}: a content selector (model=content_selector), not a summarizer; "
                  "its test is its results.json", file=sys.stderr)
        elif not (run.path / "summaries.jsonl").exists():
            last = run.path / "checkpoints" / "last.ckpt"
            finish = f"resume it with ckpt_path={last}" if last.exists() else "run it again"
            print(f"table4: leaving out {run.path}: it has no test results (summaries.jsonl); {finish}",
                  file=sys.stderr)
        else:
            done.append(run)
    if not done:
        raise SystemExit("table4: none of the runs given has test results (summaries.jsonl)")
    return done


def read_summaries(run: Path) -> list[dict]:
    """The rows of the run's `summaries.jsonl`: id, summary, reference (text, one sentence a line), scores (and, from
    later tests, greedy, lead3 and the summary's shape). A field of another type is a DataError naming its line."""
    rows = [checked_summary(row) for row in jsonl_rows(run / "summaries.jsonl")]
    if not rows:
        raise DataError(f"{run / 'summaries.jsonl'}: no records")
    return rows


def checked_summary(row: Row) -> dict:
    for key in ("id", "summary", "reference"):
        row.text(key)
    checked_scores(row, row.value("scores"), "scores")
    if "greedy" in row.data:
        greedy = row.value("greedy")
        if not isinstance(greedy, dict) or not isinstance(greedy.get("summary"), str):
            raise row.error("field 'greedy' must be an object with a string 'summary'")
        checked_scores(row, greedy.get("scores"), "greedy.scores")
    if "lead3" in row.data:
        row.text("lead3")
    for key in (k for k in SHAPE_KEYS if k in row.data):
        row.number(key)
    return row.data


def checked_scores(row: Row, scores: object, name: str) -> None:
    """Scores: an object of finite numbers, or null where a metric did not apply."""
    if not isinstance(scores, dict):
        raise row.error(f"field {name!r} must be an object of numbers, got {json.dumps(scores)[:60]}")
    for key in scores:
        Row(row.path, row.line, scores).number(key)  # a DataError naming the line and the metric


def has_greedy(run: Run) -> bool:
    """Whether the run's test kept greedy decodes beside its beam (runs tested since 2026-11-28)."""
    return "greedy" in read_summaries(run.path)[0]


def score_run(run: Run, metrics: dict, decoder: str = "beam") -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """The run's means (and `n`), and its scores per article id, of its test's beam decodes or, with `decoder`
    "greedy", of its greedy decodes; with each summary's length in `tokens` (and, greedy, the rest of its
    `summary_shape`: the beam blocks repeated trigrams). ROUGE and `metrics`
    are computed anew; the metrics that read the article (not in summaries.jsonl: the unsupervised QA metrics,
    LS-Score) are taken as the run scored them at test time."""
    path = run.path / "summaries.jsonl"
    rows = read_summaries(run.path)
    if decoder == "greedy":
        rows = [{**row, **row["greedy"]} for row in rows]  # the greedy summary, with its own scores
    hyps = [split_at_sentence_ends(r["summary"].split()) for r in rows]
    refs = [[s.split() for s in r["reference"].split("\n")] for r in rows]
    from_text = {key: metric for key, metric in metrics.items() if not metric.display.reads_article}
    means, per_example = evaluate(hyps, refs, from_text)
    shape = SHAPE_KEYS if decoder == "greedy" else ("tokens",)
    for scores, hyp in zip(per_example, hyps):
        scores |= {key: value for key, value in summary_shape(hyp).items() if key in shape}
    means |= mean_shape(per_example)
    for key in dict.fromkeys([*run.stored, *sorted(metrics.keys() - from_text.keys())]):
        stored = [r["scores"].get(key) for r in rows]
        if all(v is not None for v in stored):
            means[key] = sum(stored) / len(stored)
            for scores, value in zip(per_example, stored):
                scores[key] = value
        elif key in metrics:  # summaries.jsonl has no article to score it with
            raise SystemExit(f"table4: {key} reads the article, which {path} does not keep, and that run's test did "
                             f"not score it: test the run with it (train=false init_from=<its checkpoint> "
                             f"'+reward@metrics.{key}={key}'), or leave {key} out of --metrics")
    by_id = dict(zip((r["id"] for r in rows), per_example))
    if len(by_id) != len(rows):
        raise SystemExit(f"table4: {path} repeats article ids ({len(rows) - len(by_id)} duplicate rows)")
    return {"n": len(rows), **means}, by_id


def format_interval(interval: Interval) -> str:
    return f"{interval.mean:+.2f} [{interval.low:+.2f}, {interval.high:+.2f}]"


@dataclass
class Comparison:
    """A row's difference from the baseline on one metric: pooled over its seeds, and seed by seed; and the same at
    equal length (`at_equal_length`; None for the lengths themselves, or runs whose lengths were not scored)."""

    pooled: Interval
    per_seed: dict[int | None, Interval]
    equal_length: Interval | None = None
    equal_length_per_seed: dict[int | None, Interval] = field(default_factory=dict)
    extrapolated: bool = False  # fewer than EXTRAPOLATED of its articles on one side of equal length

    def equal_length_cell(self) -> str:
        return starred(self.equal_length) + ("†" if self.extrapolated else "")

    @property
    def significant_seeds(self) -> int:
        return sum(interval.significant for interval in self.per_seed.values())


def compare_rows(rows: dict[str, list[Run]], pairs: dict[Path, Run], scores: dict[Path, dict], metrics: list[str],
                 resamples: int, seed: int) -> dict[str, dict[str, Comparison]]:
    """Every non-baseline row's `Comparison` on each metric that its runs scored (a metric read at test time, such as
    an MLE run's LS-Score, may be missing from another run), each run paired by article with its own baseline; at
    equal length too, where the runs' summaries' `tokens` were scored."""
    out = {}
    for row, runs in rows.items():
        if runs[0].path not in pairs:
            continue
        out[row] = {}
        for metric in metrics:
            if any(metric not in article for run in runs for article in scores[run.path].values()):
                continue
            lengths = metric not in SHAPE_KEYS and all("tokens" in article for run in [*runs, *(pairs[r.path] for r in
                                                       runs)] for article in scores[run.path].values())
            keys = [metric, "tokens"] if lengths else [metric]
            pairs_of = {run.seed: paired_differences(scores[run.path], scores[pairs[run.path].path], keys, row,
                                                     pairs[run.path].row) for run in runs}
            deltas = [d[:, 0] for d in pairs_of.values()]
            comparison = Comparison(pooled_bootstrap(deltas, resamples, seed, LEVEL),
                                    {s: paired_bootstrap(d[:, 0], resamples, seed, LEVEL) for s, d in pairs_of.items()})
            if lengths:
                gaps = [d[:, 1] for d in pairs_of.values()]
                pooled_gaps = np.concatenate(gaps)
                comparison.extrapolated = bool(min(np.mean(pooled_gaps <= 0), np.mean(pooled_gaps >= 0)) < EXTRAPOLATED)
                comparison.equal_length = pooled_bootstrap(deltas, resamples, seed, LEVEL, gaps)
                comparison.equal_length_per_seed = {s: paired_bootstrap(d[:, 0], resamples, seed, LEVEL, d[:, 1])
                                                    for s, d in pairs_of.items()}
            out[row][metric] = comparison
    return out


def compare_with_control(rows: dict[str, list[Run]], scores: dict[Path, dict], own: dict[str, str], resamples: int,
                         seed: int) -> tuple[str | None, dict[str, Interval]]:
    """The control row (the length-only reward's), and each other reward row's difference from it on its own
    metric: each seed's run paired by article with the control's run of that seed, pooled over the seeds both have."""
    control = next((row for row, runs in rows.items() if runs[0].control), None)
    if control is None:
        return None, {}
    by_seed = {run.seed: run for run in rows[control]}
    out = {}
    for row, metric in own.items():
        runs = [run for run in rows[row] if run.seed in by_seed and not run.control]
        if not runs or any(metric not in article for run in [*runs, *rows[control]]
                           for article in scores[run.path].values()):
            continue
        deltas = [paired_differences(scores[run.path], scores[by_seed[run.seed].path], metric, row, control)
                  for run in runs]
        out[row] = pooled_bootstrap(deltas, resamples, seed, LEVEL)
    return control, out


def best_row(results: dict[str, dict[str, float]], metric: str, candidate: str) -> str:
    """The row with the highest mean on `metric`: `candidate` where it ties for the top."""
    top = max(results[r][metric] for r in results if metric in results[r])
    return candidate if results[candidate][metric] >= top else next(r for r in results if results[r].get(metric) == top)


def starred(interval: Interval) -> str:
    return format_interval(interval) + ("*" if interval.significant else "")


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


def lead3_row(run: Run, metrics: dict) -> dict[str, float] | None:
    """See et al.'s Lead-3 baseline (the article's first three sentences, as the run's test kept them) scored as the
    rows are, to place the MLE model; None for a run tested before tests kept it."""
    rows = read_summaries(run.path)
    if "lead3" not in rows[0]:
        return None
    from_text = {key: metric for key, metric in metrics.items() if not metric.display.reads_article}
    hyps = [split_at_sentence_ends(r["lead3"].split()) for r in rows]
    means, _ = evaluate(hyps, [[s.split() for s in r["reference"].split("\n")] for r in rows], from_text)
    return {"n": len(rows), "seeds": 0, **means}


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


def interval_fields(interval: Interval) -> dict[str, float | bool]:
    return {"delta": interval.mean, "low": interval.low, "high": interval.high, "significant": interval.significant}


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


def runs_caption(runs: list[Run]) -> str:
    """What varies between machines and seeds, for figure titles: the runs' seeds and torch thread counts."""
    def listed(values: set) -> str:
        return ", ".join(str(v) for v in sorted(values, key=str))
    return f"seed {listed({r.seed for r in runs})}, threads {listed({r.threads for r in runs})}"


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
        scale = float(np.std([v for vs in values.values() for v in vs]))
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


def row_means(scored: list[dict[str, float]]) -> dict[str, float]:
    """A row's means over its seeds' runs (each run's mean over articles), with its article count and seeds."""
    keys = [k for k in scored[0] if k != "n" and all(k in s for s in scored)]
    return {"n": scored[0]["n"], "seeds": len(scored), **{k: float(np.mean([s[k] for s in scored])) for k in keys}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sumrl-table4", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path, help="run directories or sweep folders")
    parser.add_argument("--metrics", nargs="*", default=["wms", "sms", "s_wms"],
                        help="reward configs (conf/reward/, or a --config-dir's reward/) used as test-time metrics")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="overrides of the metric configs, e.g. wms.embeddings.path=glove.840B.300d.txt")
    add_config_dir_argument(parser)
    parser.add_argument("--out", type=Path, help="where to write table4.md/csv/json/png (default: the sweep "
                                                  "holding all the runs, else their common folder)")
    parser.add_argument("--baseline", default="mle", help="the run name of the row the others are compared with "
                                                          "(bottom_up_mle for the bottom-up grid)")
    parser.add_argument("--resamples", type=positive_int, default=1000, help="bootstrap resamples per interval")
    parser.add_argument("--seed", type=int_at_least(0), default=0,
                        help="seed of the bootstrap's resampling (and of the "
                                                             "examples' tie-break)")
    parser.add_argument("--wandb", action="store_true",
                        help="also log the tables and figures to wandb, as a run in the sweep's group (offline unless "
                             "credentials are found)")
    parser.add_argument("--examples", type=int_at_least(0), default=0, metavar="N",
                        help="show N test articles' reference and every row's summary with its own metric's score: "
                             "those whose own metrics vary most across the rows")
    args = parser.parse_args(argv)
    args.metrics, paths = metrics_and_paths(args.metrics, args.config_dir)
    args.paths += paths
    if not args.paths:
        parser.error("the following arguments are required: paths")

    runs = tested([Run.read(path) for path in find_runs(args.paths)])
    if not any(args.baseline in (run.run_name, run.row) for run in runs) and args.baseline != "mle":
        parser.error(f"argument --baseline: {args.baseline} names none of the runs given (their names: "
                     f"{', '.join(sorted({run.run_name for run in runs}))})")
    check_seeds_differ_only(runs)
    pairs = pair_with_baselines(runs, args.baseline)
    check_decoded_alike(pairs)
    try:
        metrics = compose_rewards(args.metrics, args.set, args.config_dir)
    except USER_ERRORS as error:
        parser.error(f"argument --metrics/--set: {error}")
    out = writable(args.out or default_out([run.path for run in runs]))
    means, scores = {}, {}
    for run in runs:
        means[run.path], scores[run.path] = score_run(run, metrics)
    headers = columns(metrics)
    for run in runs:
        headers |= {key: column for key, column in run.columns.items() if key not in headers}
    headers["tokens"] = SHAPE_HEADERS["tokens"]
    baseline = baseline_row(runs, args.baseline)
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
                                       args.resamples, args.seed)
        except ValueError as error:
            raise SystemExit(f"table4: {error}") from error
        control = compare_with_control(rows, scores, own, args.resamples, args.seed)
        report += "\n\n" + significance_report(results, comparisons, baseline, own, headers, seeds, args.resamples,
                                                 args.seed, control)
        greedy, greedy_results, greedy_comparisons = greedy_report(rows, pairs, metrics, comparisons, own, headers,
                                                                   args.resamples, args.seed)
        report += "\n\n" + greedy if greedy else ""
    else:
        greedy_results, greedy_comparisons, control = {}, {}, (None, {})
        print(f"table4: no intervals were computed (they need the {baseline} run, run_name {args.baseline}, "
              "and at least one other)", file=sys.stderr)
    labelled = {(run.row if len(row_runs) == 1 else f"{run.row} (seed {run.seed})"): run.path
                for row_runs in rows.values() for run in row_runs}
    evidence = validation_evidence(labelled, out, runs_caption(runs))
    report += "\n\n" + evidence if evidence else ""
    if args.examples > 0:
        report += "\n\n" + examples_block(rows, scores, headers, args.examples, args.seed)
    write_text(out / "table4.md", report + "\n")
    write_results_csv(out / "table4.csv", shown, comparisons)
    table = {model: dict(row) for model, row in shown.items()}
    for model, cells in comparisons.items():
        table[model]["vs_mle"] = {metric: interval_fields(c.pooled) for metric, c in cells.items()}
        table[model]["vs_mle_equal_length"] = {
            metric: interval_fields(c.equal_length) | {"extrapolated": c.extrapolated} for metric, c in cells.items()
            if c.equal_length}
        table[model]["vs_mle_per_seed"] = {str(s): {metric: interval_fields(c.per_seed[s]) for metric, c in
                                                    cells.items()} for s in next(iter(cells.values())).per_seed}
    for model, means_greedy in greedy_results.items():
        table[model]["greedy"] = dict(means_greedy)
        table[model]["greedy"]["vs_mle"] = {metric: interval_fields(c.pooled)
                                            for metric, c in greedy_comparisons.get(model, {}).items()}
    table["diagonal"] = {}  # each reward run on its own metric, by run name
    for row, metric in own.items():
        comparison = comparisons.get(row, {}).get(metric)
        if comparison:
            table["diagonal"][rows[row][0].run_name] = {
                "row": row, "metric": metric, **interval_fields(comparison.pooled), "seeds": len(comparison.per_seed),
                "seeds_significant": comparison.significant_seeds, "best_row": best_row(results, metric, row) == row,
                "equal_length": interval_fields(comparison.equal_length) if comparison.equal_length else None,
                "vs_control": interval_fields(control[1][row]) if row in control[1] else None}
    table["control"] = control[0]
    write_text(out / "table4.json", json.dumps(table, indent=2) + "\n")
    if comparisons:
        plot_differences(out / "table4_diff.png", comparisons, baseline, headers, runs_caption(runs))
    if args.wandb:
        log_report(out, sweep_group(out), {"table4": out / "table4.csv"},
                   {"table4_diff": out / "table4_diff.png", "validation_curves": out / "val_curves.png"})
    print(report)  # after the files: a reader that stops early (`| head`) leaves them written


cli = command(main)  # the console command: bad input is one line, not a traceback

if __name__ == "__main__":
    cli()
