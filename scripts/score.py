r"""Score a JSONL file of candidate summaries with any rewards: by default a run's summaries.jsonl (fields
`summary` and `reference`).

    sumrl-score summaries.jsonl --rewards rouge_l sms --set rouge_l.beta=1.2 \
        --tokenize treebank rouge_l=whitespace -o scores.jsonl --keep id

Rewards are named by their config in conf/reward/ and scored through `RewardInput.from_texts`,
the batched code path of training. Per-example scores go to --output as JSONL (raw values,
in [0, 1] for the built-in rewards); corpus means are printed as a markdown table, each at its reward's
display scale (`rewards.base.Display`: ROUGE x100 and mover's similarities x1000, as Clark et al. 2019 print them).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from scripts.cli import InputError, add_scoring_arguments, command, output_file, score_rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sumrl-score", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", help="JSONL, one candidate per line")
    parser.add_argument("-o", "--output", help="per-example scores, JSONL: input line number, --keep fields, "
                                               "one field per reward")
    parser.add_argument("--keep", nargs="+", default=[], metavar="FIELD",
                        help="input fields copied into each output line (e.g. an id)")
    add_scoring_arguments(parser, candidate_field="summary")  # a run's summaries.jsonl scores without flags
    args = parser.parse_args(argv)
    if args.output:
        output_file(parser, Path(args.output), "--output", Path(args.input))
    return args


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Score the file; returns each reward's mean (unscaled)."""
    args = parse_args(argv)
    from models.text.records import read_jsonl, write_text
    from trainer.evaluate import columns
    from trainer.tables import markdown_table
    rows = read_jsonl(args.input)
    rewards, scores = score_rows(args, rows)
    clashes = set(rewards) & ({"line"} | set(args.keep))
    if clashes:
        raise InputError(f"reward labels {sorted(clashes)} clash with output fields; relabel them with LABEL=NAME")
    if args.output:
        lines = []
        for i, row in enumerate(rows):
            out = {"line": row.line, **{field: row.value(field) for field in args.keep}}
            out.update({label: values[i] for label, values in scores.items()})
            lines.append(json.dumps(out) + "\n")
        write_text(args.output, "".join(lines))
    means, table = {}, []
    headers = columns(rewards)  # the reward ROUGE-L is not rouge-score's: "ROUGE-L (reward)"
    for label, values in scores.items():
        scored = [v for v in values if v is not None]
        means[label] = sum(scored) / len(scored) if scored else float("nan")
        scale = rewards[label].display.scale
        table.append([label, headers[label], str(len(scored)), f"{means[label] * scale:.2f}", f"×{scale:g}"])
    print(markdown_table(["reward", "column", "n", "mean", "scale"], table))
    return means


cli = command(main)  # the console command: bad input is one line, not a traceback

if __name__ == "__main__":
    cli()
