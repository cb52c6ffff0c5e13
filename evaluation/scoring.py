"""Scoring a run's test summaries anew with every metric table4 shows, per article (the bootstrap's unit), and the
Lead-3 row beside them."""
from __future__ import annotations


import numpy as np

from evaluation.runs import EvaluationRefused, Run, read_summaries
from models.text.vocab import split_at_sentence_ends
from trainer.evaluate import SHAPE_KEYS, evaluate, mean_shape, summary_shape


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
            raise EvaluationRefused(f"{key} reads the article, which {path} does not keep, and that run's test did "
                             f"not score it: test the run with it (train=false init_from=<its checkpoint> "
                             f"'+reward@metrics.{key}={key}'), or leave {key} out of --metrics")
    by_id = dict(zip((r["id"] for r in rows), per_example))
    if len(by_id) != len(rows):
        raise EvaluationRefused(f"{path} repeats article ids ({len(rows) - len(by_id)} duplicate rows)")
    return {"n": len(rows), **means}, by_id


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


def row_means(scored: list[dict[str, float]]) -> dict[str, float]:
    """A row's means over its seeds' runs (each run's mean over articles), with its article count and seeds."""
    keys = [k for k in scored[0] if k != "n" and all(k in s for s in scored)]
    return {"n": scored[0]["n"], "seeds": len(scored), **{k: float(np.mean([s[k] for s in scored])) for k in keys}}
