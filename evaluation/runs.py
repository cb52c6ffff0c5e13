"""Finding the runs of a sweep and what their records say: each run's row, seed and lineage, its baseline (the run it
started from), and the checks that keep a comparison honest (seeds that differ only in their seed, rows decoded as
their baselines were, runs that have test results)."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from models.text.records import DataError, Row, jsonl_rows
from rewards.configs import instantiate_or_refuse
from trainer.checkpoints import SELECTOR_STAGE
from trainer.evaluate import ROW_NAMES, SHAPE_KEYS, table_record
from trainer.folders import check_writable


class EvaluationRefused(ValueError):
    """Runs that cannot be read as a table, or not compared honestly (seeds that differ in more than their seed,
    baselines decoded otherwise, ...): the commands report it in one line."""


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
    names = cfg.get("row_names") or cfg.get("rows") or ROW_NAMES  # `rows` before 2026-12-02
    return table_record(reward, metrics, names, (cfg.get("rl") or {}).get("length_neutral", 0.0))


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
            raise EvaluationRefused(f"{path} is not a directory (give run directories or sweep folders)")
        if is_run(path):
            runs.append(path)
            continue
        children = [p for p in sorted(path.iterdir()) if is_run(p)]
        if not children and (path / "multirun.yaml").exists():
            children = runs_below(path)
        if not children:
            sweeps = sorted((p for p in path.iterdir() if p.is_dir() and runs_below(p)), key=lambda p: p.name)
            if not sweeps:
                raise EvaluationRefused(f"no run directories (with config.yaml) under {path}")
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
            raise EvaluationRefused(f"{run.row!r} would pool seeds {other.seed} and {run.seed}, whose settings differ "
                             f"in {', '.join(differ[:8])}{', …' if len(differ) > 8 else ''} ({other.path} and "
                             f"{run.path}): give table4 runs that differ in their seed only")


def check_decoded_alike(pairs: dict[Path, Run]) -> None:
    """A row and the baseline it is compared with must have been tested with one decoder (`module.beam`: beam size,
    maximum and minimum length, blocking): a difference that is partly the decoder's is refused, naming the keys."""
    for path, base in pairs.items():
        a, b = ({k: v for k, v in flat_settings(p).items() if k.startswith("module.beam.")} for p in (base.path, path))
        differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        if differ:
            raise EvaluationRefused(f"{path} was tested with another decoder than its baseline {base.path} "
                             f"({', '.join(f'{k}: {b.get(k)} against {a.get(k)}' for k in differ[:4])}): test both "
                             "with one decoder (train=false init_from=<checkpoint> module.beam...=...)")


def writable(out: Path) -> Path:
    """The --out folder, made now (`check_writable`, as a run's folder is): one that cannot be written would fail after
    all the scoring."""
    check_writable(out, "--out")  # a SettingsError, which a command line reports in one line
    return out


def baseline_row(runs: list[Run], baseline: str) -> str:
    """The row of the runs named `baseline` (a run name or a row; `mle`: also the MLE row of runs named otherwise)."""
    return next((run.row for run in runs if baseline in (run.run_name, run.row)), ROW_NAMES.get(baseline, baseline))


def pair_with_baselines(runs: list[Run], baseline: str) -> dict[Path, Run]:
    """Each non-baseline run's baseline run: the one it started from (its lineage), or, for runs that do not
    record one, the baseline run of its seed. Two runs of one name and seed are not seeds of one grid: refused."""
    seen: dict[tuple[str, int | None], Run] = {}
    for run in runs:
        other = seen.setdefault((run.row, run.seed), run)
        if other is not run:
            raise EvaluationRefused(f"{other.path} and {run.path} are both {run.row!r} with seed {run.seed}: "
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
                raise EvaluationRefused(f"{run.path} descends from runs {', '.join(run.lineage)} (it started from "
                                 f"{run.init_from}), none of which is a {baseline} run given: add the run it started "
                                 "from")
        else:
            same_seed = [b for b in bases if b.seed == run.seed]
            if len(same_seed) != 1:
                raise EvaluationRefused(f"{run.path} records no starting run, and there is no {baseline} run of "
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
        raise EvaluationRefused("none of the runs given has test results (summaries.jsonl)")
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


def runs_caption(runs: list[Run]) -> str:
    """What varies between machines and seeds, for figure titles: the runs' seeds and torch thread counts."""
    def listed(values: set) -> str:
        return ", ".join(str(v) for v in sorted(values, key=str))
    return f"seed {listed({r.seed for r in runs})}, threads {listed({r.threads for r in runs})}"
