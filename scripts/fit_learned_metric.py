r"""Fit a learned metric, as Scialom et al. (2019) §2.4: ridge regression from metric scores to a human
judgment, chosen among feature subsets by held-out Spearman correlation, written as a reward config.

    python scripts/fit_learned_metric.py scored.jsonl --features rouge_l qa_conf qa_fscore \
        --target readability relevance --exclude system=reference -o conf/reward/learned.yaml

The input is JSONL with one numeric field per metric (e.g. the output of scripts/score.py, with the
human fields kept) and the human fields; several --target fields are combined by their geometric
mean (the paper's "readable and relevant"). Rows with a null in any used field are dropped. Every
non-empty feature subset is fitted on a random half of the rows and scored on the other half
(Spearman), over --splits splits shared by all subsets; the table lists the mean and std of those
correlations and each subset's weights refitted on all rows. The best subset becomes a
`rewards.base.WeightedSum` whose terms are the reward configs named like the features, so
`-o conf/reward/learned.yaml` trains with `reward=learned`. Weights apply to raw metric values.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.stats import spearmanr

from models.text.records import Row, read_jsonl, write_text
from rewards.names import reward_configs
from scripts.cli import InputError, command, parse_exclusions, positive_int
from trainer.tables import markdown_table


@dataclass(frozen=True)
class SubsetFit:
    features: tuple[str, ...]
    mean: float        # held-out Spearman over the splits (NaN splits, a constant prediction, left out)
    std: float
    weights: dict[str, float]  # refitted on all rows
    intercept: float


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", help="JSONL with metric fields and human fields (numbers or null)")
    parser.add_argument("--features", nargs="+", required=True, metavar="FIELD",
                        help="metric fields, each named like its reward config in conf/reward/")
    parser.add_argument("--target", nargs="+", required=True, metavar="FIELD",
                        help="human field(s); several are combined by their geometric mean (positive values)")
    parser.add_argument("--exclude", nargs="+", action="extend", default=[], metavar="FIELD=VALUE",
                        help="drop rows whose FIELD equals VALUE (non-strings in JSON spelling), e.g. system=reference")
    parser.add_argument("--splits", type=positive_int, default=1000, help="random 50/50 splits (paper: 1000)")
    parser.add_argument("--ridge", type=positive_float, default=1.0, help="ridge penalty λ (paper: 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-subset-size", type=positive_int, default=1)
    parser.add_argument("-o", "--output", help="write the best subset's reward config here (default: print only)")
    parser.add_argument("--name", help="the reward's name (default: WeightedSum's, from the weights)")
    args = parser.parse_args(argv)
    if len(set(args.features)) != len(args.features):
        parser.error(f"--features repeats a field: {args.features}")
    if args.min_subset_size > len(args.features):
        parser.error(f"--min-subset-size {args.min_subset_size} exceeds the {len(args.features)} features")
    return args


def ridge(x: np.ndarray, y: np.ndarray, lam: float) -> tuple[np.ndarray, float]:
    """Weights and intercept minimizing |y - b - xw|² + λ|w|²; the intercept is not penalized, so x and
    y are centered first."""
    x_mean, y_mean = x.mean(axis=0), y.mean()
    xc = x - x_mean
    w = np.linalg.solve(xc.T @ xc + lam * np.eye(x.shape[1]), xc.T @ (y - y_mean))
    return w, float(y_mean - x_mean @ w)


def geometric_mean(row: Row, fields: Sequence[str]) -> float:
    values = [row.number(f) for f in fields]
    if len(fields) == 1:
        return values[0]
    for field, value in zip(fields, values):
        if value <= 0:
            raise row.error(f"field {field!r} must be positive for the geometric mean of {list(fields)}, got {value}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def fit_subsets(x: np.ndarray, y: np.ndarray, features: Sequence[str], splits: int, lam: float, seed: int,
                min_size: int = 1) -> list[SubsetFit]:
    """Every feature subset of at least `min_size`, best mean held-out Spearman first."""
    rng = np.random.default_rng(seed)
    halves = [rng.permutation(len(y)) for _ in range(splits)]  # the same splits for every subset
    fits = []
    for size in range(min_size, len(features) + 1):
        for subset in itertools.combinations(range(len(features)), size):
            xs = x[:, list(subset)]
            rhos = []
            for order in halves:
                train, test = order[:len(y) // 2], order[len(y) // 2:]
                w, b = ridge(xs[train], y[train], lam)
                pred = xs[test] @ w + b
                rhos.append(np.nan if np.ptp(pred) == 0 else spearmanr(pred, y[test])[0])
            w, b = ridge(xs, y, lam)
            fits.append(SubsetFit(tuple(features[i] for i in subset), float(np.nanmean(rhos)),
                                  float(np.nanstd(rhos)), dict(zip((features[i] for i in subset), map(float, w))), b))
    return sorted(fits, key=lambda f: math.inf if math.isnan(f.mean) else -f.mean)


def reward_config(fit: SubsetFit, source: str, n: int, target: str, name: str | None) -> str:
    """A reward config whose terms are the project's reward configs, composed by Hydra's defaults list."""
    lines = [f"# Learned metric fitted by scripts/fit_learned_metric.py on {source} ({n} rows, target {target}): "
             f"mean held-out Spearman {fit.mean:.4f}",
             f"# The intercept ({fit.intercept:.6g}) is left out: a constant reward does not change the RL advantage.",
             "# Weights apply to raw metric values (unstandardized).",
             "defaults:"]
    lines += [f"  - /reward@terms.{f}: {f}" for f in fit.features]
    lines += ["  - _self_", "_target_: rewards.base.WeightedSum"]
    lines += [f"name: {json.dumps(name)}"] if name else []
    lines += ["weights:"] + [f"  {f}: {w!r}" for f, w in fit.weights.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[SubsetFit]:
    """Print the table and the best subset's config; returns the fits, best first."""
    args = parse_args(argv)
    exclusions = parse_exclusions(args.exclude)
    rows = [row for row in read_jsonl(args.input) if not any(row.matches(f, v) for f, v in exclusions)]
    used = [row for row in rows if all(row.number(f) is not None for f in args.features + args.target)]
    if len(used) < 6:  # each half needs 3 rows for a rank correlation to mean anything
        raise InputError(f"{args.input}: {len(used)} rows without nulls in {args.features + args.target}; need 6")
    x = np.array([[row.number(f) for f in args.features] for row in used])
    y = np.array([geometric_mean(row, args.target) for row in used])
    fits = fit_subsets(x, y, args.features, args.splits, args.ridge, args.seed, args.min_subset_size)
    target = args.target[0] if len(args.target) == 1 else f"geometric mean of {' and '.join(args.target)}"
    print(f"{len(used)} rows ({len(rows) - len(used)} dropped for a null); target: {target}; "
          f"ridge λ = {args.ridge:g}, {args.splits} random 50/50 splits\n")
    print(markdown_table(["subset", "mean Spearman", "std", "weights (all rows)"],
                         [[" + ".join(f.features), f"{f.mean:.4f}", f"{f.std:.4f}",
                           ", ".join(f"{k} {w:.4g}" for k, w in f.weights.items())] for f in fits]))
    config = reward_config(fits[0], args.input, len(used), target, args.name)
    print("\n" + config, end="")
    missing = [f for f in fits[0].features if f not in reward_configs()]
    if missing:
        print(f"note: no conf/reward/ config for {missing}; the config composes once they exist", file=sys.stderr)
    if args.output:
        write_text(args.output, config)
    return fits


cli = command(main)  # the console command: bad input is one line, not a traceback

if __name__ == "__main__":
    cli()
