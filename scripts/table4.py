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
from pathlib import Path

from scripts.cli import add_config_dir_argument, command, int_at_least, metrics_and_paths, positive_int, user_errors


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
    from evaluation.runs import (Run, check_decoded_alike, check_seeds_differ_only, default_out, find_runs,
                                 pair_with_baselines, tested, writable)
    from evaluation.table import make_table4, write_table4
    from rewards.configs import compose_rewards
    from trainer.loggers import log_report, sweep_group

    runs = tested([Run.read(path) for path in find_runs(args.paths)])
    if not any(args.baseline in (run.run_name, run.row) for run in runs) and args.baseline != "mle":
        parser.error(f"argument --baseline: {args.baseline} names none of the runs given (their names: "
                     f"{', '.join(sorted({run.run_name for run in runs}))})")
    check_seeds_differ_only(runs)
    pairs = pair_with_baselines(runs, args.baseline)
    check_decoded_alike(pairs)
    try:
        metrics = compose_rewards(args.metrics, args.set, args.config_dir)
    except user_errors() as error:
        parser.error(f"argument --metrics/--set: {error}")
    out = writable(args.out or default_out([run.path for run in runs]))
    table = make_table4(runs, pairs, metrics, args.baseline, args.resamples, args.seed, args.examples, out)
    write_table4(table, out)
    if args.wandb:
        log_report(out, sweep_group(out), {"table4": out / "table4.csv"},
                   {"table4_diff": out / "table4_diff.png", "validation_curves": out / "val_curves.png"})
    print(table.report)  # after the files: a reader that stops early (`| head`) leaves them written


cli = command(main)  # the console command: bad input is one line, not a traceback

if __name__ == "__main__":
    cli()
