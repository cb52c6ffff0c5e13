"""Aggregate run directories into Clark et al.'s Table 4 layout.

    python scripts/table4.py multirun/demo_grid            # the newest sweep under it
    python scripts/table4.py runs/a runs/b --metrics wms sms s_wms

Each run is a directory with `config.yaml` and `checkpoints/`. A run whose test split has not been
decoded yet is decoded now with beam search from its best checkpoint. Every run is then scored with the
same metrics (ROUGE from rouge-score; the mover's metrics with exact EMD), whatever it trained with.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rewards.scoring import compose_rewards  # noqa: E402
from trainer.evaluate import evaluate, results_table  # noqa: E402
from trainer.vocab import split_at_sentence_ends  # noqa: E402

ROW_NAMES = {"mle": "MLE+Pgen (no reward)", "rouge_l": "Mixed w/ ROUGE-L", "wms": "Mixed w/ WMS",
             "sms": "Mixed w/ SMS", "s_wms": "Mixed w/ S+WMS"}


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


def score_run(run: Path, metrics: dict) -> dict[str, float]:
    rows = [json.loads(line) for line in (run / "summaries.jsonl").open(encoding="utf-8")]
    hyps = [split_at_sentence_ends(r["summary"].split()) for r in rows]
    refs = [[s.split() for s in r["reference"].split("\n")] for r in rows]
    means, _ = evaluate(hyps, refs, metrics)
    return {"n": len(rows), **means}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="run directories or sweep folders")
    parser.add_argument("--metrics", nargs="*", default=["wms", "sms", "s_wms"],
                        help="reward configs (conf/reward/) used as test-time metrics")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="overrides of the metric configs, e.g. wms.embeddings.path=glove.840B.300d.txt")
    parser.add_argument("--out", type=Path, help="where to write table4.md/json (default: the first path)")
    args = parser.parse_args(argv)

    metrics = compose_rewards(args.metrics, args.set)
    results = {}
    for run in find_runs(args.paths):
        if not (run / "summaries.jsonl").exists():
            decode_test_split(run)
        name = OmegaConf.load(run / "config.yaml").get("run_name") or run.name
        results[ROW_NAMES.get(name, name)] = score_run(run, metrics)
    order = list(ROW_NAMES.values())
    results = dict(sorted(results.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
    table = results_table(results)
    print(table)
    out = args.out or (args.paths[0] if args.paths[0].is_dir() else args.paths[0].parent)
    (out / "table4.md").write_text(table + "\n")
    (out / "table4.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
