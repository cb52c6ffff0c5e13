r"""Correlate metrics with human judgments (meta-evaluation), as in Clark et al. (2019) Table 2.

    python scripts/correlate.py judgments.jsonl --human overall grammar --exclude system=reference \
        --rewards rouge_l sms --set rouge_l.beta=1.2 --tokenize treebank rouge_l=whitespace

Scores each row's candidate against its reference with every reward (as scripts/score.py does),
then prints, per human dimension, a markdown table of Spearman, Pearson and Kendall correlations
and a matrix of Williams-test p-values. Rows whose judgment is null are left out of that
dimension only.

Clark et al. (2019) Table 2, "Summaries" column (paper: ROUGE-L 0.117; GloVe 300-d WMS 0.180,
SMS 0.258, S+WMS 0.214; here with GloVe 6B 50d: 0.117, 0.177, 0.244, 0.209). ROUGE-L reads
lower-cased whitespace tokens (Clark et al.'s setting), the mover's metrics PTB tokens:

    python scripts/correlate.py /work/shared/data/human/chaganty2018_cnndm.jsonl --human overall \
        --exclude system=reference --rewards rouge_l wms sms s_wms --set rouge_l.beta=1.2 \
        --tokenize treebank rouge_l=whitespace
"""
from __future__ import annotations

import argparse
import math
import sys

from rewards.correlation import CORRELATIONS, correlation, williams_matrix
from rewards.scoring import (USER_ERRORS, InputError, add_scoring_arguments, markdown_table, parse_exclusions, read_jsonl,
                             score_rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", help="JSONL with candidate, reference and human-score fields")
    parser.add_argument("--human", nargs="+", required=True, metavar="FIELD",
                        help="human-judgment fields (numbers or null), one table each")
    parser.add_argument("--exclude", nargs="+", action="extend", default=[], metavar="FIELD=VALUE",
                        help="drop rows whose FIELD equals VALUE (non-strings in JSON spelling: null, 1, true), "
                             "e.g. system=reference")
    parser.add_argument("--williams", choices=sorted(CORRELATIONS), default="spearman",
                        help="correlation the Williams test compares (default: spearman, as Clark et al.)")
    add_scoring_arguments(parser)
    return parser.parse_args(argv)


def format_p(p: float) -> str:
    """A p-value with the paper's stars: * p < 0.05, ** p < 0.01; n/a where the test is undefined."""
    if math.isnan(p):
        return "n/a"
    stars = "**" if p < 0.01 else "*" if p < 0.05 else ""
    return ("<0.001" if p < 0.001 else f"{p:.3f}") + stars


def report(dimension: str, n: int, correlations: dict[str, dict[str, float]],
           p_values: dict[tuple[str, str], float], williams: str) -> str:
    """Markdown: each metric's correlations with one human dimension, then the Williams matrix."""
    metrics, methods = list(correlations), list(CORRELATIONS)
    table = [[name] + [f"{correlations[name][m]:.3f}" for m in methods] for name in metrics]
    matrix = [[a] + ["–" if a == b else format_p(p_values[a, b]) for b in metrics] for a in metrics]
    return "\n\n".join([
        f"## {dimension} (n = {n})",
        markdown_table(["metric"] + [m.capitalize() for m in methods], table),
        f"Williams test on {williams.capitalize()} correlations: one-sided p-value that the row metric "
        f"correlates with {dimension} more than the column metric (* p < 0.05, ** p < 0.01).",
        markdown_table([""] + metrics, matrix),
    ])


def main(argv: list[str] | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """Print the report; returns {dimension: {metric: {method: correlation}}}."""
    args = parse_args(argv)
    exclusions = parse_exclusions(args.exclude)
    rows = [row for row in read_jsonl(args.input)
            if not any(row.matches(field, value) for field, value in exclusions)]
    judgments = {dim: [row.number(dim) for row in rows] for dim in args.human}
    # Score only rows that some dimension will use.
    used = [i for i in range(len(rows)) if any(judgments[dim][i] is not None for dim in args.human)]
    if not used:
        raise InputError(f"{args.input}: no row left with a human judgment in {args.human}")
    _, scores = score_rows(args, [rows[i] for i in used])
    results, sections = {}, []
    for dim in args.human:
        # A pair needs the judgment and every metric (a reference-based metric is null without a reference).
        keep = [j for j, i in enumerate(used)
                if judgments[dim][i] is not None and all(v[j] is not None for v in scores.values())]
        human = [judgments[dim][used[j]] for j in keep]
        metrics = {label: [values[j] for j in keep] for label, values in scores.items()}
        if len(human) <= 3:
            raise InputError(f"{args.input}: only {len(human)} fully scored rows judge {dim!r}; need more than 3")
        results[dim] = {label: {m: correlation(v, human, m) for m in CORRELATIONS} for label, v in metrics.items()}
        p_values = williams_matrix(human, metrics, args.williams)
        sections.append(report(dim, len(human), results[dim], p_values, args.williams))
    print("\n\n".join(sections))
    return results


if __name__ == "__main__":
    try:
        main()
    except USER_ERRORS as e:
        sys.exit(f"error: {e}")
