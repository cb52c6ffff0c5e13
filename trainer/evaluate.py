"""Test-time scoring of decoded summaries: ROUGE as rouge-score computes it, plus any reward used as
a metric (the mover's similarities with exact EMD). Independent of the reward a model trained with."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from models.decoding import Decoded
from models.text.batch import Batch
from models.text.records import write_text
from models.text.vocab import Vocabulary, as_text, split_at_sentence_ends
from rewards.base import Reward
from rewards.rouge import ROUGE_COLUMNS, RougeScore
from rewards.scoring import score_tokenized
from trainer.tables import markdown_table

log = logging.getLogger(__name__)

TEST_ROUGE = {key: RougeScore(key) for key in ROUGE_COLUMNS}  # what every test scores, first, whatever else it scores
ROW_NAMES = {"mle": "MLE+Pgen (no reward)", "mixed": "Mixed w/ {reward}"}  # conf/train.yaml's `row_names`


SHAPE_KEYS = ("tokens", "repeated_trigrams")


def summary_shape(sentences: list[list[str]]) -> dict[str, float]:
    """A summary's tokens and the share of its trigrams that already occurred earlier in it: what trigram blocking
    removes at test, so a decoder's repeats show beside its scores."""
    tokens = [token for sentence in sentences for token in sentence]
    trigrams = list(zip(tokens, tokens[1:], tokens[2:]))
    return {"tokens": len(tokens), "repeated_trigrams": (len(trigrams) - len(set(trigrams))) / max(len(trigrams), 1)}


def mean_shape(shapes: list[dict[str, float]]) -> dict[str, float]:
    """The mean of each `summary_shape` key the shapes hold (none for no summaries)."""
    return {key: sum(s[key] for s in shapes) / len(shapes) for key in SHAPE_KEYS if key in shapes[0]} if shapes else {}


def decoded_summaries(vocab: Vocabulary, decoded: Decoded, batch: Batch) -> list[dict]:
    """Each decoded row of a batch as its article's summary (sentences of tokens), with its id, reference and
    article text."""
    written = []
    for i, (ids, n) in enumerate(zip(decoded.ids.tolist(), decoded.lengths.tolist())):
        tokens = vocab.decode(ids[:n], batch.oovs[i])
        written.append({"id": batch.ids[i], "summary": split_at_sentence_ends(tokens),
                        "reference": batch.references[i], "article": batch.texts[i]})
    return written


def evaluate(hypotheses: list[list[list[str]]], references: list[list[list[str]]],
             metrics: Mapping[str, Reward] | None = None, device: torch.device | str = "cpu",
             sources: list[str] | None = None) -> tuple[dict[str, float], list[dict[str, float | None]]]:
    """Corpus means and per-example scores, as the papers print them (each metric at its `Display.scale`: ROUGE and QA
    ×100, mover's ×1000).
    `sources`: the articles' text, for metrics that read the article (the unsupervised QA metrics).

    A metric that does not apply to an example (None: e.g. a mover's similarity whose reference has no
    content word) leaves it out of that metric's mean, with a warning that counts such examples."""
    scored = TEST_ROUGE | dict(metrics or {})
    per_example: list[dict[str, float | None]] = [{} for _ in hypotheses]
    for name, values in score_tokenized(scored, hypotheses, references, sources, device=device).items():
        for row, value in zip(per_example, values):
            row[name] = None if value is None else scored[name].display.scale * value
    means = {}
    for key in per_example[0] if per_example else []:
        values = [r[key] for r in per_example if r[key] is not None]
        if len(values) < len(per_example):
            log.warning("%s does not apply to %d of %d examples (no reference content); its mean is over "
                        "the other %d", key, len(per_example) - len(values), len(per_example), len(values))
        if values:
            means[key] = sum(values) / len(values)
    return means, per_example


def write_test_files(rows: list[dict], metrics: Mapping[str, Reward], device: torch.device | str,
                     output_dir: Path) -> dict[str, Any]:
    """A test's files, from its rows (per article: `id`, the beam `summary`, the `greedy` decode, the `reference`,
    None without one, the `article` and its `lead3`, summaries as sentences of tokens). `summaries.jsonl`: per
    labelled article, the beam summary with its scores, tokens and repeated-trigram share, the same of the greedy
    decode under `greedy`, and the lead-3; `results.json`: their means (the greedy ones under `greedy`), returned."""
    rows = [r for r in rows if r["reference"] is not None]
    scored = {decoder: evaluate([r[decoder] for r in rows], [r["reference"] for r in rows], metrics, device=device,
                                sources=[r["article"] for r in rows])
              for decoder in ("summary", "greedy")}
    shapes = {decoder: [summary_shape(r[decoder]) for r in rows] for decoder in scored}
    output_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, row in enumerate(rows):
        summary, reference, plain, lead = as_text([row["summary"], row["reference"], row["greedy"], row["lead3"]])
        lines.append(json.dumps({"id": row["id"], "summary": summary, "reference": reference,
                                 "scores": scored["summary"][1][i], **shapes["summary"][i],
                                 "greedy": {"summary": plain, "scores": scored["greedy"][1][i], **shapes["greedy"][i]},
                                 "lead3": lead}) + "\n")
    write_text(output_dir / "summaries.jsonl", "".join(lines))
    means = {decoder: scored[decoder][0] | mean_shape(shapes[decoder]) for decoder in scored}
    results = {"n": len(rows), **means["summary"], "greedy": means["greedy"]}
    write_text(output_dir / "results.json", json.dumps(results, indent=2) + "\n")
    return results


def columns(metrics: Mapping[str, Reward]) -> dict[str, str]:
    """Table headers of `evaluate`'s keys: ROUGE's, then each metric's own (`Display.column`), in that order. A metric
    whose column an earlier key's already is (the ROUGE-L reward's LCS F on tokens, beside rouge-score's stemmed
    ROUGE-L) is headed "<column> (reward)": one name, one number; the test's own ROUGE under another key keeps it."""
    headers: dict[str, str] = {}
    for key, metric in (TEST_ROUGE | dict(metrics)).items():
        same = isinstance(metric, RougeScore) and metric.name in TEST_ROUGE  # the test's own ROUGE (reward=rouge_1)
        taken = metric.display.column in headers.values() and not same
        headers[key] = metric.display.column + (" (reward)" if taken else "")
    return headers


def table_record(reward: Reward | None, metrics: Mapping[str, Reward], row_names: Mapping[str, str] = ROW_NAMES,
                 length_neutral: float = 0.0) -> dict[str, Any]:
    """What table4 shows of a run (kept in its config.yaml as `table`): its row (`row_names`, `{reward}` standing for the
    reward's column; a run trained length-neutral, `rl.length_neutral`, says so in its row), the test metric its
    reward is judged on, the column of each test metric, and the metrics only the test could score (they read the
    article, which summaries.jsonl does not keep), and whether its reward is a control (`Reward.control`: the
    length-only row)."""
    record = {"row": row_names["mle"], "test_metric": None, "columns": columns(metrics),
              "stored": [key for key, metric in metrics.items() if metric.display.reads_article], "control": False}
    if reward is not None:
        record["row"] = row_names["mixed"].format(reward=reward.display.column)
        if length_neutral:
            record["row"] += f", length-neutral {length_neutral:g}"
        record["test_metric"] = reward.test_metric.name
        record["control"] = bool(reward.control)
        record["columns"].setdefault(record["test_metric"], reward.display.column)
    return record


def results_table(results: Mapping[str, Mapping[str, Any]], headers: Mapping[str, str] = ROUGE_COLUMNS,
                  cell: Callable[[Any], str] = "{:.2f}".format) -> str:
    """A markdown table, one row per run: the `headers` keys in their order (their values head the columns), then any
    other key; `cell` formats each value (a mean by default)."""
    keys = [k for k in headers if any(k in r for r in results.values())]
    keys += sorted({k for r in results.values() for k in r} - set(keys) - {"n"})
    return markdown_table(["model", *(headers.get(k, k) for k in keys)],
                          [[name, *(cell(row[k]) if k in row else "-" for k in keys)] for name, row in results.items()])
