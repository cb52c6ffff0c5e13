r"""Correlate metrics with human judgments (meta-evaluation), as in Clark et al. (2019) Table 2.

    sumrl-correlate judgments.jsonl --human overall grammar --exclude system=reference \
        --rewards rouge_l sms --set rouge_l.beta=1.2 --tokenize treebank rouge_l=whitespace

Scores each row's candidate against its reference with every reward (as scripts/score.py does),
then prints, per human dimension and protocol (`--protocol`, see rewards/correlation.py):
  - summary: Spearman, Pearson and Kendall correlations over all judged summaries, and a matrix of
    Williams-test p-values;
  - pairs: input-level pairwise system differences (Toutanova et al. 2016 §4.3.2): per pair of
    systems, the Pearson r of metric and human differences over inputs; then, per two metrics, on how
    many pairs the first is significantly better (Williams, p < 0.05), "dominates" on >= 80%;
  - system: the correlations of per-system means.
With several references per row (a list field, `--references-field`, e.g. the MSR compression rows of
`python -m rewards.msr_compression`), `--multi-reference 1 2` adds ROUGE-N recall against all of them as Toutanova
et al. (2016, §4.1) aggregate them: rouge_<n>_mult_{max,all,prob} (`rewards.rouge.multi_reference_recall`), on the
tokens of `--multi-reference-tokenize`.
Rows whose judgment is null are left out of that dimension only. `--systems` keeps the inputs
(`--input-field`) that have a row for every listed system; a later row of the same input and system
replaces an earlier one.

Clark et al. (2019) Table 2, "Summaries" column (paper: ROUGE-L 0.117; GloVe 300-d WMS 0.180,
SMS 0.258, S+WMS 0.214; here with GloVe 6B 50d: 0.117, 0.177, 0.244, 0.209). ROUGE-L reads
lower-cased whitespace tokens (Clark et al.'s setting), the mover's metrics PTB tokens:

    sumrl-correlate /work/shared/data/human/chaganty2018_cnndm.jsonl --human overall \
        --exclude system=reference --rewards rouge_l wms sms s_wms --set rouge_l.beta=1.2 \
        --tokenize treebank rouge_l=whitespace

Wu et al. (2020) Table 1 (paper: ROUGE-1 .1953 / .0975 / .2174; here the same) on the 1,996 summaries of the 499
documents judged for all five systems, ROUGE recall as the `rouge` package computes it (distinct n-grams, case
kept, text split on '.' and whitespace); `--protocol pairs` gives the six system pairs:

    sumrl-correlate /work/shared/data/human/chaganty2018_cnndm.jsonl \
        --human overall grammar redundancy --input-field doc_id --systems seq2seq pointer ml ml+rl \
        --rewards rouge_1_recall --tokenize rouge_package --protocol summary pairs system
"""
from __future__ import annotations

import argparse
import json
import math

from models.text.records import Row, read_jsonl
from rewards.correlation import (CORRELATIONS, correlation, dominance, input_level_pairs, system_level,
                                 williams_matrix)
from rewards.names import TOKENIZERS
from scripts.cli import InputError, add_scoring_arguments, command, parse_exclusions, positive_int, score_rows
from trainer.tables import markdown_table

PROTOCOLS = ("summary", "pairs", "system")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sumrl-correlate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", help="JSONL with candidate, reference and human-score fields")
    parser.add_argument("--human", nargs="+", required=True, metavar="FIELD",
                        help="human-judgment fields (numbers or null), one table each")
    parser.add_argument("--exclude", nargs="+", action="extend", default=[], metavar="FIELD=VALUE",
                        help="drop rows whose FIELD equals VALUE (non-strings in JSON spelling: null, 1, true), "
                             "e.g. system=reference")
    parser.add_argument("--williams", choices=sorted(CORRELATIONS), default="spearman",
                        help="correlation the Williams test compares (default: spearman, as Clark et al.)")
    parser.add_argument("--protocol", nargs="+", choices=PROTOCOLS, default=["summary"],
                        help="summary-level, input-level pairwise system differences, and/or system-level")
    parser.add_argument("--input-field", default=None,
                        help="the field naming each row's input (document); needed by --systems and the pairs protocol")
    parser.add_argument("--system-field", default="system")
    parser.add_argument("--systems", nargs="+", default=None, metavar="SYSTEM",
                        help="keep only these systems, and only inputs that have a row for each of them")
    parser.add_argument("--multi-reference", nargs="+", type=positive_int, default=[], metavar="N",
                        help="add ROUGE-N recall against every reference in --references-field: MULT-MAX, "
                             "MULT-ALL and MULT-PROB (Toutanova et al. 2016)")
    parser.add_argument("--references-field", default="references", help="a list of reference strings per row")
    parser.add_argument("--multi-reference-tokenize", choices=TOKENIZERS, default="treebank")
    add_scoring_arguments(parser)
    args = parser.parse_args(argv)
    if args.input_field is None and (args.systems or "pairs" in args.protocol):
        parser.error("--systems and --protocol pairs need --input-field")
    return args


def references_of(row: Row, field: str) -> list[str]:
    """A row's list of reference strings (at least one)."""
    value = row.value(field)
    if not isinstance(value, list) or not value or not all(isinstance(r, str) for r in value):
        raise row.error(f"field {field!r} must be a non-empty list of strings")
    return value


def multi_reference_scores(rows: list[Row], candidate_field: str, references_field: str, orders: list[int],
                           tokenizer: str) -> dict[str, list[float]]:
    """rouge_<n>_mult_<method> of each row's candidate against all its references, for each n in `orders`."""
    from rewards.rouge import MULTI_REFERENCE, multi_reference_recall
    from rewards.scoring import hypothesis_tokens, tokenize
    words = lambda text: hypothesis_tokens(tokenize(text, tokenizer))  # noqa: E731
    candidates = [words(row.text(candidate_field)) for row in rows]
    references = [[words(r) for r in references_of(row, references_field)] for row in rows]
    return {f"rouge_{n}_mult_{method}": [multi_reference_recall(c, refs, n, method)
                                         for c, refs in zip(candidates, references)]
            for n in orders for method in MULTI_REFERENCE}


def complete_inputs(rows: list[Row], input_field: str, system_field: str, systems: list[str]) -> list[Row]:
    """Rows of `systems` whose input has a row for every one of them; a later row of the same input and system
    replaces an earlier one (as a mapping keyed by system would: Wu et al.'s 1,996 Chaganty summaries)."""
    by_input: dict[str, dict[str, Row]] = {}
    for row in rows:
        system = row.text(system_field)
        if system in systems:
            by_input.setdefault(str(row.value(input_field)), {})[system] = row
    return [by_system[s] for by_system in by_input.values() if len(by_system) == len(systems) for s in systems]


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


def pairs_report(dimension: str, pairs: dict[tuple[str, str], dict]) -> str:
    """Markdown: each metric's Pearson r per system pair, then how often each metric beats each other one."""
    metrics = list(next(iter(pairs.values()))["pearson"]) if pairs else []
    table = [[name] + [f"{result['pearson'][name]:.3f}" for result in pairs.values()] for name in metrics]
    wins = dominance(pairs)
    matrix = [[a] + ["–" if a == b else f"{wins[a, b][0]}/{len(pairs)}" + (" dominates" if wins[a, b][1] else "")
                     for b in metrics] for a in metrics]
    return "\n\n".join([
        f"## {dimension}: input-level pairwise system differences",
        markdown_table(["metric"] + [f"{a} − {b} (n = {r['n']})" for (a, b), r in pairs.items()], table),
        "System pairs on which the row metric correlates significantly better than the column metric "
        "(Williams, p < 0.05); 'dominates': on at least 80% of them.",
        markdown_table([""] + metrics, matrix),
    ])


def system_report(dimension: str, n_systems: int, correlations: dict[str, dict[str, float]]) -> str:
    """Markdown: the correlations of per-system means with the humans' per-system means."""
    table = [[name] + [f"{correlations[m][name]:.3f}" for m in CORRELATIONS] for name in correlations["spearman"]]
    return "\n\n".join([f"## {dimension}: system level ({n_systems} systems)",
                         markdown_table(["metric"] + [m.capitalize() for m in CORRELATIONS], table)])


def main(argv: list[str] | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """Print the report; returns the summary-level {dimension: {metric: {method: correlation}}} (empty without the
    summary protocol)."""
    args = parse_args(argv)
    exclusions = parse_exclusions(args.exclude)
    every_row = read_jsonl(args.input)
    for field, value in exclusions:  # a misspelt value would exclude nothing, silently
        if not any(row.matches(field, value) for row in every_row):
            values = sorted({v if isinstance(v, str) else json.dumps(v) for v in (r.value(field) for r in every_row)})
            raise InputError(f"--exclude {field}={value}: no row of {args.input} has that value (its values: "
                             f"{', '.join(values[:10])}{', …' if len(values) > 10 else ''})")
    rows = [row for row in every_row if not any(row.matches(field, value) for field, value in exclusions)]
    if args.systems:
        rows = complete_inputs(rows, args.input_field, args.system_field, args.systems)
    judgments = {dim: [row.number(dim) for row in rows] for dim in args.human}
    # Score only rows that some dimension will use.
    used = [i for i in range(len(rows)) if any(judgments[dim][i] is not None for dim in args.human)]
    if not used:
        raise InputError(f"{args.input}: no row left with a human judgment in {args.human}")
    # The multi-reference scores first: a bad references field fails before the rewards load their models.
    multi = multi_reference_scores([rows[i] for i in used], args.candidate_field, args.references_field,
                                   args.multi_reference, args.multi_reference_tokenize) if args.multi_reference else {}
    scores = score_rows(args, [rows[i] for i in used])[1] | multi
    results, sections = {}, []
    for dim in args.human:
        # A pair needs the judgment and every metric (a reference-based metric is null without a reference).
        keep = [j for j, i in enumerate(used)
                if judgments[dim][i] is not None and all(v[j] is not None for v in scores.values())]
        human = [judgments[dim][used[j]] for j in keep]
        metrics = {label: [values[j] for j in keep] for label, values in scores.items()}
        if len(human) <= 3:
            raise InputError(f"{args.input}: only {len(human)} fully scored rows judge {dim!r}; need more than 3")
        if "summary" in args.protocol:
            results[dim] = {label: {m: correlation(v, human, m) for m in CORRELATIONS} for label, v in metrics.items()}
            p_values = williams_matrix(human, metrics, args.williams)
            sections.append(report(dim, len(human), results[dim], p_values, args.williams))
        systems = [rows[used[j]].text(args.system_field) for j in keep]
        if "pairs" in args.protocol:
            inputs = [str(rows[used[j]].value(args.input_field)) for j in keep]
            sections.append(pairs_report(dim, input_level_pairs(inputs, systems, human, metrics)))
        if "system" in args.protocol:
            if len(set(systems)) < 2:
                raise InputError(f"{args.input}: --protocol system correlates per-system means, and {dim!r} is judged "
                                 f"for {len(set(systems))} system ({args.system_field}): it needs at least 2")
            by_method = {m: system_level(systems, human, metrics, m) for m in CORRELATIONS}
            sections.append(system_report(dim, len(set(systems)), by_method))
    print("\n\n".join(sections))
    return results


cli = command(main)  # the console command: bad input is one line, not a traceback

if __name__ == "__main__":
    cli()
