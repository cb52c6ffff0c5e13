"""evaluation/significance.py (paired bootstrap intervals) against hand-computed cases and scipy, and
scripts/table4.py's difference-from-MLE table on hand-made run directories."""
from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rouge_score import rouge_scorer
from scipy import stats

from conftest import run_config
from rewards.base import Display, Reward
from rewards.configs import compose_rewards
from rewards.mover import SentenceMoverSimilarity, SentenceWordMoverSimilarity, WordMoverSimilarity
from rewards.rouge import RougeL
from test_scripts import load_script, write_jsonl
from rewards.length import LengthOnly
from evaluation.runs import EvaluationRefused
from evaluation.significance import (Interval, at_equal_length, paired_bootstrap, paired_differences,
                                     pooled_bootstrap)
from trainer.settings import SettingsError


REPO = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------- paired_bootstrap

@pytest.mark.parametrize("c", [0.0, 1.5, -0.25, 3.0])
def test_constant_deltas_give_a_point_interval(c):
    # Every resample of n copies of c has mean c (exactly: these sums are exact in binary floating point).
    interval = paired_bootstrap(np.full(40, c))
    assert (interval.mean, interval.low, interval.high) == (c, c, c)
    assert interval.significant == (c != 0)


def test_symmetric_deltas_are_not_significant():
    # The resampled mean is (2k − 100)/100 with k ~ Binomial(100, 1/2): sd 0.1, so the 95% interval is
    # about ±1.96 · 0.1.
    interval = paired_bootstrap(np.array([-1.0, 1.0] * 50))
    assert interval.mean == 0 and interval.low < 0 < interval.high and not interval.significant
    assert interval.low == pytest.approx(-0.196, abs=0.03) and interval.high == pytest.approx(0.196, abs=0.03)


def test_significant_means_excludes_zero():
    assert Interval(1.0, 0.1, 2.0).significant and Interval(-1.0, -2.0, -0.1).significant
    assert not Interval(0.5, 0.0, 1.0).significant and not Interval(0.0, -1.0, 1.0).significant


def monte_carlo_se(deltas: np.ndarray, resamples: int, q: float = 0.025) -> float:
    """Standard error of a bootstrap percentile estimated from `resamples` draws: sqrt(q(1−q)/B) / f(x_q),
    with f the density of the resampled means, about Normal(mean, s/√n)."""
    sd = deltas.std() / math.sqrt(deltas.size)
    density = stats.norm.pdf(stats.norm.ppf(q)) / sd
    return math.sqrt(q * (1 - q) / resamples) / density


@pytest.mark.parametrize("resamples", [1000, 20000])
def test_agrees_with_scipy_percentile_bootstrap(resamples):
    deltas = np.random.default_rng(7).normal(0.3, 1.0, size=200)
    reference = stats.bootstrap((deltas,), np.mean, method="percentile", confidence_level=0.95,
                                n_resamples=20000, rng=np.random.default_rng(1)).confidence_interval
    ours = paired_bootstrap(deltas, resamples=resamples)
    # Both are Monte Carlo estimates of the same percentiles from independent streams: allow 4 standard
    # errors of their difference (0.025 at 1,000 resamples, 0.0075 at 20,000; the interval is ±0.14 wide).
    tolerance = 4 * math.hypot(monte_carlo_se(deltas, resamples), monte_carlo_se(deltas, 20000))
    assert ours.mean == pytest.approx(deltas.mean())
    assert ours.low == pytest.approx(reference.low, abs=tolerance)
    assert ours.high == pytest.approx(reference.high, abs=tolerance)


def test_seed_reproduces_the_interval():
    deltas = np.random.default_rng(3).normal(0.1, 1.0, size=200)
    first = paired_bootstrap(deltas, seed=5)
    assert paired_bootstrap(deltas, seed=5) == first
    other = paired_bootstrap(deltas, seed=6)
    assert other != first and other.mean == first.mean
    tolerance = 4 * math.sqrt(2) * monte_carlo_se(deltas, 1000)
    assert other.low == pytest.approx(first.low, abs=tolerance) and other.high == pytest.approx(first.high, abs=tolerance)


# ---------------------------------------------------------------- the difference at equal length

def test_equal_length_is_the_intercept_of_the_regression_on_the_length_gap():
    """By hand: gaps 0, 2, 1, 3 (mean 1.5), differences 1, 3, 2, 6 (mean 3); covariance sum 8, variance sum 5, so the
    slope is 1.6 and the intercept 3 − 1.6 · 1.5 = 0.6."""
    deltas, gaps = np.array([1.0, 3.0, 2.0, 6.0]), np.array([0.0, 2.0, 1.0, 3.0])
    assert at_equal_length(deltas, gaps) == pytest.approx(0.6)
    assert paired_bootstrap(deltas, length_gaps=gaps).mean == pytest.approx(0.6)
    assert at_equal_length(deltas, np.full(4, 7.0)) == pytest.approx(3.0)  # no spread in length: the mean


def synthetic_row(rng: np.random.Generator, gain: float, n: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """A row whose summaries run 5–40 tokens longer than the baseline's and whose metric is 0.5 a token of length
    plus `gain`, with noise."""
    gaps = rng.integers(5, 40, size=n).astype(float)
    return 0.5 * gaps + gain + rng.normal(0, 1.0, size=n), gaps


@pytest.mark.parametrize("gain", [0.0, 2.0])
def test_equal_length_recovers_a_known_gain_that_length_would_hide(gain):
    rng = np.random.default_rng(7)
    (d0, g0), (d1, g1) = synthetic_row(rng, gain), synthetic_row(rng, gain)
    raw, equal = paired_bootstrap(d0), paired_bootstrap(d0, length_gaps=g0)
    assert raw.low > 10  # the plain difference is mostly length
    assert equal.low < gain < equal.high and equal.high - equal.low < 1.0
    pooled = pooled_bootstrap([d0, d1], length_gaps_per_seed=[g0, g1])
    assert pooled.low < gain < pooled.high and pooled.significant == (gain > 0)
    # the same resamples as the plain interval: one seed pools to the paired one
    assert pooled_bootstrap([d0], length_gaps_per_seed=[g0]) == equal


def test_equal_length_refuses_gaps_that_do_not_match_the_differences():
    with pytest.raises(ValueError, match="length_gaps must match deltas"):
        paired_bootstrap(np.zeros(5), length_gaps=np.zeros(4))


def test_paired_differences_of_a_metric_and_its_lengths_drop_an_article_together():
    scores = {"a": {"m": 3.0, "tokens": 10}, "b": {"m": None, "tokens": 12}, "c": {"m": 5.0, "tokens": 9}}
    base = {"a": {"m": 1.0, "tokens": 8}, "b": {"m": 2.0, "tokens": 8}, "c": {"m": 1.0, "tokens": 9}}
    assert paired_differences(scores, base, ["m", "tokens"]).tolist() == [[2.0, 2.0], [4.0, 0.0]]


# ---------------------------------------------------------------- pooled_bootstrap (seeds, then articles)

def test_one_seed_pools_to_the_paired_interval():
    deltas = np.random.default_rng(4).normal(0.2, 1.0, size=150)
    assert pooled_bootstrap([deltas], seed=3) == paired_bootstrap(deltas, seed=3)


def test_seeds_that_disagree_widen_the_pooled_interval():
    """Hand-made: every seed's per-article differences are constant, so each seed alone is a point interval. Seeds
    at +1 and +3 agree on a positive effect; seeds at −1 and +5 disagree. Article resampling alone (pooling all
    differences into one list) would call both certain; the two-level interval spans the seeds' spread, and the
    disagreeing pair's covers 0."""
    agree = pooled_bootstrap([np.full(50, 1.0), np.full(50, 3.0)])
    disagree = pooled_bootstrap([np.full(50, -1.0), np.full(50, 5.0)])
    assert agree.mean == disagree.mean == 2.0
    # Drawing two seeds with replacement gives means 1, 2 or 3 (−1, 2 or 5): the 95% interval is the extremes.
    assert (agree.low, agree.high) == (1.0, 3.0) and agree.significant
    assert (disagree.low, disagree.high) == (-1.0, 5.0) and not disagree.significant
    article_only = paired_bootstrap(np.r_[np.full(50, -1.0), np.full(50, 5.0)])
    assert article_only.significant and article_only.high - article_only.low < 2.0


def test_pooled_bootstrap_refuses_empty_seeds():
    with pytest.raises(ValueError, match="non-empty"):
        pooled_bootstrap([np.ones(3), np.array([])])


# ---------------------------------------------------------------- paired_differences (articles paired by id)

def row_interval(per_article: dict) -> Interval:
    """The paired interval of the row "row" against the baseline "mle" on metric "m", as table4 forms it."""
    return paired_bootstrap(paired_differences(per_article["row"], per_article["mle"], "m", "row", "mle"))


def scores_by_id(values: np.ndarray) -> dict[str, dict[str, float]]:
    return {f"a{i:03d}": {"m": float(v)} for i, v in enumerate(values)}


def shuffled(scores: dict, seed: int) -> dict:
    ids = list(scores)
    np.random.default_rng(seed).shuffle(ids)
    return {i: scores[i] for i in ids}


def test_articles_are_paired_by_id_not_by_position():
    # The row scores each article exactly 2 above the baseline; listed in another order, a pairing by
    # position would see noise, a pairing by id sees exactly +2 in every resample.
    base = np.random.default_rng(0).normal(size=100)
    per_article = {"mle": scores_by_id(base), "row": shuffled(scores_by_id(base + 2.0), 1)}
    interval = row_interval(per_article)
    assert (interval.mean, interval.low, interval.high) == pytest.approx((2.0, 2.0, 2.0), abs=1e-12)


def test_row_order_does_not_change_the_interval():
    rng = np.random.default_rng(2)
    base, row = rng.normal(size=150), rng.normal(0.2, 1.0, size=150)
    per_article = {"mle": scores_by_id(base), "row": scores_by_id(row)}
    expected = paired_bootstrap(row - base)
    assert row_interval(per_article) == expected
    per_article = {"mle": shuffled(per_article["mle"], 3), "row": shuffled(per_article["row"], 4)}
    assert row_interval(per_article) == expected


def test_articles_a_metric_does_not_apply_to_drop_out_of_its_pairs():
    rng = np.random.default_rng(5)
    base, row = rng.normal(size=40), rng.normal(size=40)
    per_article = {"mle": scores_by_id(base), "row": scores_by_id(row)}
    for scores in per_article.values():  # None, as trainer.evaluate leaves a mover's metric without reference content
        scores["a000"]["m"] = None
    assert row_interval(per_article) == paired_bootstrap(row[1:] - base[1:])


def test_mismatched_article_ids_raise():
    base = scores_by_id(np.zeros(10))
    row = {k: v for k, v in base.items() if k not in ("a000", "a001")} | {"extra": {"m": 1.0}}
    with pytest.raises(ValueError, match=r"'row': 3 article ids differ .*2 only in 'mle'"):
        row_interval({"mle": base, "row": row})


# ---------------------------------------------------------------- table4.py

WORDS = ("river bridge mountain forest village market teacher doctor garden winter summer harbor castle island "
         "valley desert engine window library museum station kitchen soldier farmer painter singer").split()
UNRELATED = "stocks fell sharply after the bank raised interest rates".split()


# The rewards of the hand-made runs, by run name (their display metadata names the rows and their test metrics).
REWARDS = {"mle": None, "rouge_l": RougeL(), "wms": WordMoverSimilarity(None), "sms": SentenceMoverSimilarity(None),
           "s_wms": SentenceWordMoverSimilarity(None), "length_only": LengthOnly()}
BOTTOM_UP = {"mle": "Bottom-up (no reward)", "mixed": "Bottom-up Mixed w/ {reward}"}
# QA rewards as table4 sees them (their display metadata), without a QA model
class StandIn(Reward):
    needs_reference = False

    def __init__(self, name: str, display: Display):
        self.name, self.display = name, display


QA_CONF = StandIn("qa_conf", Display("QAconf", 100, reads_article=True))
LS_SCORE = StandIn("ls_score", Display("LS-Score", reads_article=True))
QA_LEARNED = StandIn("qa_learned", Display("QA learned", 100, True))


def write_run(root: Path, run_name: str, summaries: list[str], references: list[str]) -> None:
    run = root / run_name
    run.mkdir()
    custom = {} if run_name in REWARDS else {"row_names": {"mle": run_name}}  # a run whose reward says nothing of itself
    (run / "config.yaml").write_text(run_config(run_name, REWARDS.get(run_name), **custom))
    write_jsonl(run / "summaries.jsonl", [{"id": f"art-{i:02d}", "summary": s, "reference": r, "scores": {}}
                                          for i, (s, r) in enumerate(zip(summaries, references))])


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """Hand-made runs on 30 articles, against MLE (half of each reference right): ROUGE-L run perfect on
    every article, WMS run identical, SMS run perfect on one article only, S+WMS run unrelated on every
    article, and a run with a name table4 does not know, perfect everywhere. Ids are listed in reverse
    order in one run, to be paired by id."""
    root = tmp_path_factory.mktemp("grid")
    rng = np.random.default_rng(0)
    references = [" ".join(rng.choice(WORDS, size=6, replace=False)) + " ." for _ in range(30)]
    mle = [" ".join(r.split()[:3] + UNRELATED[:3]) + " ." for r in references]
    write_run(root, "mle", mle, references)
    write_run(root, "rouge_l", references, references)
    write_run(root, "wms", mle, references)
    write_run(root, "sms", [references[0], *mle[1:]], references)
    write_run(root, "s_wms", [" ".join(UNRELATED) + " ."] * 30, references)
    write_run(root, "custom", references, references)
    lines = (root / "custom" / "summaries.jsonl").read_text().splitlines()
    (root / "custom" / "summaries.jsonl").write_text("\n".join(reversed(lines)) + "\n")
    return root


SIGNIFICANT = {"Mixed w/ ROUGE-L": True, "Mixed w/ WMS": False, "Mixed w/ SMS": False, "Mixed w/ S+WMS": True,
               "custom": True}


def test_table4_marks_exactly_the_rows_that_differ(grid, capsys):
    load_script("table4").main([str(grid), "--metrics", "wms", "sms", "--out", str(grid)])
    printed = capsys.readouterr().out
    report = (grid / "table4.md").read_text()
    assert printed.strip() == report.strip()
    means_table, differences = report.split("Difference from MLE+Pgen (no reward):")
    assert "| MLE+Pgen (no reward) | " in means_table and "| MLE+Pgen (no reward) | " not in differences
    assert "paired bootstrap over 30 test articles, 1,000 resamples, seed 0, 95% percentile intervals; " \
           "* = interval excludes 0" in differences
    plain, equal = differences.split("Difference from MLE+Pgen (no reward) at equal length")
    rows = {line.split(" | ")[0][2:]: line.strip("| ").split(" | ")[1:]
            for line in plain.splitlines() if line.startswith("| ") and "---" not in line}
    # the S+WMS run's summaries are all 3 tokens longer: its equal-length cells are marked as extrapolated
    assert "| Mixed w/ S+WMS | " in equal and all(cell.endswith("†") for cell in next(
        line for line in equal.splitlines() if line.startswith("| Mixed w/ S+WMS")).strip("| ").split(" | ")[1:])
    assert set(rows) == set(SIGNIFICANT) | {"model"}
    assert rows["model"] == ["ROUGE-1", "ROUGE-2", "ROUGE-L", "ROUGE-Lsum", "WMS", "SMS", "tokens"]
    for model, significant in SIGNIFICANT.items():
        assert [cell.endswith("*") for cell in rows[model][:6]] == [significant] * 6, model
    assert set(rows["Mixed w/ WMS"]) == {"+0.00 [+0.00, +0.00]"}
    assert all(cell.startswith("-") for cell in rows["Mixed w/ S+WMS"][:6]) and rows["Mixed w/ S+WMS"][6].startswith("+3")

    # The diagonal: each known reward row on its own metric (S+WMS was not computed, custom has none).
    diagonal = [line for line in differences.splitlines() if line.startswith("- ")]
    assert [line.split(":")[0] for line in diagonal] == ["- Mixed w/ ROUGE-L on ROUGE-L", "- Mixed w/ WMS on WMS",
                                                         "- Mixed w/ SMS on SMS"]
    assert diagonal[0].endswith(") significant; the best row there; at equal length +50.00 [+50.00, +50.00]*")
    assert ") not significant; Mixed w/ ROUGE-L is higher; at equal length +0.00 [" in diagonal[1]
    assert ") not significant; Mixed w/ ROUGE-L is higher; at equal length " in diagonal[2]

    table = json.loads((grid / "table4.json").read_text())
    lines = list(csv.DictReader((grid / "table4.csv").open()))
    assert len(lines) == 6 * 7  # the metrics and the summaries' tokens
    for line in lines:
        model, metric = line["model"], line["metric"]
        assert float(line["mean"]) == pytest.approx(table[model][metric]) and line["n"] == "30"
        if model == "MLE+Pgen (no reward)":
            assert line["delta"] == line["significant"] == "" and "vs_mle" not in table[model]
        elif metric == "tokens":  # 7 a summary, but S+WMS's 10 ("stocks fell … rates .")
            assert float(line["delta"]) == (3 if model == "Mixed w/ S+WMS" else 0) and line["equal_length_delta"] == ""
        else:
            assert line["significant"] == str(SIGNIFICANT[model])
            delta = table[model][metric] - table["MLE+Pgen (no reward)"][metric]
            assert float(line["delta"]) == pytest.approx(delta, abs=1e-9)
            assert float(line["low"]) <= float(line["delta"]) <= float(line["high"])
            assert table[model]["vs_mle"][metric]["significant"] == SIGNIFICANT[model]
    assert (grid / "table4_diff.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table4_without_mle_prints_means_only(grid, tmp_path, capsys):
    load_script("table4").main([str(grid / "wms"), str(grid / "sms"), "--metrics", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert "| Mixed w/ WMS | " in captured.out and "Difference" not in captured.out
    assert "no intervals were computed" in captured.err
    lines = list(csv.DictReader((tmp_path / "table4.csv").open()))
    assert len(lines) == 2 * 5 and all(line["delta"] == "" for line in lines)
    assert not (tmp_path / "table4_diff.png").exists()


def test_table4_refuses_runs_on_different_articles(grid, tmp_path):
    write_run(tmp_path, "mle", ["a b ."] * 3, ["a b ."] * 3)
    with pytest.raises(EvaluationRefused, match=r"'Mixed w/ WMS': 27 article ids differ"):
        load_script("table4").main([str(tmp_path / "mle"), str(grid / "wms"), "--metrics", "--out", str(tmp_path)])


def test_table4_takes_qa_scores_as_the_runs_scored_them(tmp_path, capsys):
    """QA metrics read the article, which summaries.jsonl does not hold: table4 uses each run's test-time scores
    (paired by id), and a QA reward row is compared with MLE on its own metric."""
    references = ["the river bridge ."] * 20
    for name, qa_conf in (("mle", 10.0), ("qa_conf", 30.0)):
        run = tmp_path / name
        run.mkdir()
        reward = QA_CONF if name == "qa_conf" else None
        (run / "config.yaml").write_text(run_config(name, reward, metrics={"qa_conf": QA_CONF}))
        write_jsonl(run / "summaries.jsonl", [{"id": f"a{i}", "summary": "the river .", "reference": r,
                                               "scores": {"qa_conf": qa_conf + i % 2}}
                                              for i, r in enumerate(references)])
    load_script("table4").main([str(tmp_path), "--metrics", "--out", str(tmp_path)])
    report = capsys.readouterr().out
    assert report.splitlines()[0].endswith("| QAconf | tokens |")
    table = json.loads((tmp_path / "table4.json").read_text())
    assert table["MLE+Pgen (no reward)"]["qa_conf"] == pytest.approx(10.5)
    assert table["Mixed w/ QAconf"]["vs_mle"]["qa_conf"]["delta"] == pytest.approx(20.0)
    assert "- Mixed w/ QAconf on QAconf: 10.50 → 30.50 (+20.00 [+20.00, +20.00]) significant; the best row there" \
        in report


def test_table4_leaves_a_cell_empty_where_only_the_baseline_scored_a_metric(tmp_path, capsys):
    """An MLE run tested with the metrics of two mixed runs, each of which scored only its own (both read the
    article): each mixed row shows '-' in the other's column, is compared on the rest, and the figure draws the cells
    there are (both used to stop with a KeyError)."""
    runs = {"mle": (None, {"qa_conf": 10.0, "ls_score": 0.25}), "qa_conf": (QA_CONF, {"qa_conf": 30.0}),
            "ls_score": (LS_SCORE, {"ls_score": 0.5})}
    for name, (reward, scores) in runs.items():
        run = tmp_path / name
        run.mkdir()
        # as `SummarizationModule.metrics_at_test` has it: a mixed run's test scores its own reward
        metrics = {"qa_conf": QA_CONF, "ls_score": LS_SCORE} if reward is None else {reward.name: reward}
        (run / "config.yaml").write_text(run_config(name, reward, metrics=metrics))
        write_jsonl(run / "summaries.jsonl", [{"id": f"a{i}", "summary": "the river .", "reference": "the river .",
                                               "scores": scores} for i in range(20)])
    load_script("table4").main([str(tmp_path), "--metrics", "--out", str(tmp_path)])
    table = json.loads((tmp_path / "table4.json").read_text())
    assert table["Mixed w/ QAconf"]["vs_mle"]["qa_conf"]["delta"] == pytest.approx(20.0)
    assert table["Mixed w/ LS-Score"]["vs_mle"]["ls_score"]["delta"] == pytest.approx(0.25)
    assert "ls_score" not in table["Mixed w/ QAconf"]["vs_mle"]
    assert "qa_conf" not in table["Mixed w/ LS-Score"]["vs_mle"]
    report = capsys.readouterr().out.splitlines()
    assert next(line for line in report if line.startswith("| Mixed w/ QAconf |")).endswith("| - | 30.00 | 3.00 |")
    assert next(line for line in report if line.startswith("| Mixed w/ LS-Score |")).endswith("| 0.50 | - | 3.00 |")
    assert (tmp_path / "table4_diff.png").exists()


def test_table4_compares_with_the_baseline_it_is_given(grid, tmp_path, capsys):
    """The bottom-up grid compares its reward rows with the bottom-up model without a reward (--baseline)."""
    for name, source in (("bottom_up_mle", "mle"), ("bottom_up_rouge_l", "rouge_l"), ("bottom_up_wms", "wms")):
        shutil.copytree(grid / source, tmp_path / name)
        (tmp_path / name / "config.yaml").write_text(run_config(name, REWARDS[source], BOTTOM_UP))
    load_script("table4").main([str(tmp_path), "--metrics", "--baseline", "bottom_up_mle", "--out", str(tmp_path)])
    report = capsys.readouterr().out
    assert "Difference from Bottom-up (no reward):" in report
    diagonal = [line for line in report.splitlines() if line.startswith("- ") and " on " in line]
    assert len(diagonal) == 1  # WMS was not computed
    assert diagonal[0].startswith("- Bottom-up Mixed w/ ROUGE-L on ROUGE-L") and ") significant;" in diagonal[0]


def test_table4_names_scialom_table2_rows(grid, tmp_path, capsys):
    rows = {"mle": "MLE+Pgen (no reward)", "mixed": "+{reward} + TL;DR"}  # as conf/experiment/scialom_table2*.yaml
    for name, source in (("mle+cnndm_sample", "mle"), ("qa_learned+cnndm_sample_tldr", "rouge_l")):
        shutil.copytree(grid / source, tmp_path / name)
        reward = QA_LEARNED if source == "rouge_l" else None
        (tmp_path / name / "config.yaml").write_text(run_config(name, reward, rows))
    load_script("table4").main([str(tmp_path), "--metrics", "--out", str(tmp_path)])
    report = capsys.readouterr().out
    assert "| +QA learned + TL;DR | " in report.split("Difference from MLE+Pgen (no reward):")[1]


# ---------------------------------------------------------------- table4.py over seeds

def write_seed_run(root: Path, name: str, seed: int, summaries: list[str], references: list[str],
                   run_id: str | None = None, lineage: tuple[str, ...] = ()) -> Path:
    run = root / name
    run.mkdir(parents=True)
    run_name = name.split("/")[-1]
    (run / "config.yaml").write_text(run_config(run_name, REWARDS[run_name], seed=seed, run_id=run_id or name,
                                                lineage=list(lineage), output_dir=str(run),
                                                data={"shuffle_seed": seed, "batch_size": 16}))
    write_jsonl(run / "summaries.jsonl", [{"id": f"art-{i:02d}", "summary": s, "reference": r, "scores": {}}
                                          for i, (s, r) in enumerate(zip(summaries, references))])
    (run / ".hydra" / "2026-01-01_00-00-00_1").mkdir(parents=True)  # Hydra's records of one start: not a run
    (run / ".hydra" / "2026-01-01_00-00-00_1" / "config.yaml").write_text("run_name: ${hydra:runtime.choices.reward}\n")
    return run


@pytest.fixture(scope="module")
def seed_grid(tmp_path_factory):
    """Three seeds of an MLE run and a ROUGE-L run on 30 articles. The ROUGE-L run of each seed copies the reference
    on 20, 20 and 0 articles (seed 2 learned nothing) and its MLE run's summary elsewhere."""
    root = tmp_path_factory.mktemp("seeds") / "sweep"
    rng = np.random.default_rng(0)
    references = [" ".join(rng.choice(WORDS, size=6, replace=False)) + " ." for _ in range(30)]
    mle = [" ".join(r.split()[:3] + UNRELATED[:3]) + " ." for r in references]
    for seed, copied in ((0, 20), (1, 20), (2, 0)):
        write_seed_run(root, f"seed_{seed}/mle", seed, mle, references, run_id=f"mle{seed}")
        write_seed_run(root, f"seed_{seed}/rouge_l", seed, references[:copied] + mle[copied:], references,
                       run_id=f"rl{seed}", lineage=(f"mle{seed}",))
    (root / "multirun.yaml").write_text("{}\n")
    return root


def test_table4_pools_seeds_and_counts_the_significant_ones(seed_grid, capsys):
    load_script("table4").main([str(seed_grid), "--metrics", "--out", str(seed_grid)])
    report = capsys.readouterr().out
    diagonal = next(line for line in report.splitlines() if line.startswith("- Mixed w/ ROUGE-L on ROUGE-L"))
    assert "2 of 3 seeds significant: seed 0 " in diagonal and "seed 2 +0.00 [+0.00, +0.00]," not in diagonal
    assert diagonal.endswith("seed 2 +0.00 [+0.00, +0.00]")
    assert "3 seeds pooled (two-level bootstrap: seeds, then articles)" in report
    table = json.loads((seed_grid / "table4.json").read_text())
    per_seed = table["Mixed w/ ROUGE-L"]["vs_mle_per_seed"]
    assert per_seed["0"]["rougeL"] == per_seed["1"]["rougeL"] and per_seed["0"]["rougeL"]["significant"]
    pooled = table["Mixed w/ ROUGE-L"]["vs_mle"]["rougeL"]
    assert pooled["delta"] == pytest.approx(2 / 3 * per_seed["0"]["rougeL"]["delta"])
    # the pooled interval reaches seed 2's 0: a third of the resamples draw it twice or more
    assert pooled["low"] < per_seed["0"]["rougeL"]["low"] and not pooled["significant"]
    assert table["diagonal"]["rouge_l"]["seeds_significant"] == 2 and table["diagonal"]["rouge_l"]["seeds"] == 3
    assert table["MLE+Pgen (no reward)"]["seeds"] == 3


def test_table4_shows_the_control_row_and_each_rewards_gain_beside_it(tmp_path, capsys):
    """Two seeds of MLE, a ROUGE-L run that copies the reference on 20 of 30 articles, and the length-only control,
    whose summaries are the MLE run's with four unrelated words more: it gains tokens, and the ROUGE-L run gains
    ROUGE-L over it, seed by seed."""
    rng = np.random.default_rng(0)
    references = [" ".join(rng.choice(WORDS, size=6, replace=False)) + " ." for _ in range(30)]
    mle = [" ".join(r.split()[:3] + UNRELATED[:3]) + " ." for r in references]
    for seed in (0, 1):
        write_seed_run(tmp_path, f"seed_{seed}/mle", seed, mle, references, run_id=f"mle{seed}")
        write_seed_run(tmp_path, f"seed_{seed}/rouge_l", seed, references[:20] + mle[20:], references,
                       run_id=f"rl{seed}", lineage=(f"mle{seed}",))
        write_seed_run(tmp_path, f"seed_{seed}/length_only", seed, [m[:-1] + " ".join(UNRELATED[3:7]) + " ."
                                                                    for m in mle], references,
                       run_id=f"len{seed}", lineage=(f"mle{seed}",))
    load_script("table4").main([str(tmp_path / "seed_0"), str(tmp_path / "seed_1"), "--metrics", "--out",
                                str(tmp_path)])
    report = capsys.readouterr().out
    assert "Control: Mixed w/ Length only (tokens) pays for length alone" in report
    diagonal = next(line for line in report.splitlines() if line.startswith("- Mixed w/ ROUGE-L on ROUGE-L"))
    assert "; beside the control (Mixed w/ Length only (tokens)) +" in diagonal
    table = json.loads((tmp_path / "table4.json").read_text())
    assert table["control"] == "Mixed w/ Length only (tokens)"
    assert table["Mixed w/ Length only (tokens)"]["vs_mle"]["tokens"]["delta"] == 4.0
    beside = table["diagonal"]["rouge_l"]["vs_control"]
    # the control's ROUGE-L per article is the MLE's less what four unrelated words cost its precision
    control_gap = table["Mixed w/ ROUGE-L"]["rougeL"] - table["Mixed w/ Length only (tokens)"]["rougeL"]
    assert beside["delta"] == pytest.approx(control_gap) and beside["significant"]
    assert table["diagonal"]["rouge_l"]["equal_length"]["delta"] == table["diagonal"]["rouge_l"]["delta"]
    # every control summary is 4 tokens longer: equal length lies outside its lengths, an extrapolation, marked
    assert table["Mixed w/ Length only (tokens)"]["vs_mle_equal_length"]["rougeL"]["extrapolated"]
    assert not table["Mixed w/ ROUGE-L"]["vs_mle_equal_length"]["rougeL"]["extrapolated"]
    equal_table = report.split("at equal length (")[1].split("Each reward on its own metric")[0]
    assert "| Mixed w/ Length only (tokens) | " in equal_table and "]*†" in equal_table and "† fewer than 5%" in report


def test_table4_leaves_out_a_run_without_test_results_and_names_it(seed_grid, tmp_path, capsys):
    """A sweep with an unfinished run gives the finished rows and a line naming that run (table4 decoded it, and
    stopped in a traceback where it could not)."""
    shutil.copytree(seed_grid, tmp_path / "sweep")
    unfinished = tmp_path / "sweep" / "seed_2" / "rouge_l"
    (unfinished / "summaries.jsonl").unlink()
    load_script("table4").main([str(tmp_path / "sweep"), "--metrics", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert f"table4: leaving out {unfinished}: it has no test results (summaries.jsonl); run it again" in err
    assert "2 of 2 seeds significant" in out and not (unfinished / "summaries.jsonl").exists()


def test_table4_refuses_to_pool_runs_whose_settings_differ_beyond_the_seed(seed_grid, tmp_path):
    """A seed-1 sweep with another learning rate and step count, tabulated with a seed-0 sweep, was pooled with it:
    "2 of 2 seeds significant"."""
    for seed, lr, steps in ((0, 3e-4, 200), (1, 3e-3, 2)):
        shutil.copytree(seed_grid / f"seed_{seed}", tmp_path / f"sweep{seed}" / f"seed_{seed}")
        config = tmp_path / f"sweep{seed}" / f"seed_{seed}" / "rouge_l" / "config.yaml"
        config.write_text(config.read_text() + f"stages:\n  mixed:\n    lr: {lr}\n    steps: {steps}\n")
    with pytest.raises(EvaluationRefused, match=r"^'Mixed w/ ROUGE-L' would pool seeds 0 and 1, whose settings differ "
                                         r"in stages\.mixed\.lr, stages\.mixed\.steps \(.*sweep0/seed_0/rouge_l and "
                                         r".*sweep1/seed_1/rouge_l\): give table4 runs that differ in their seed only$"):
        load_script("table4").main([str(tmp_path / "sweep0"), str(tmp_path / "sweep1"), "--metrics", "--out",
                                    str(tmp_path)])


def test_table4_compares_a_run_with_the_mle_run_it_started_from(seed_grid, tmp_path, capsys):
    """Seed 1's ROUGE-L run started from seed 0's MLE run (its lineage says so), not from the MLE run of its seed."""
    shutil.copytree(seed_grid / "seed_0" / "mle", tmp_path / "a")
    shutil.copytree(seed_grid / "seed_1" / "rouge_l", tmp_path / "b")
    (tmp_path / "b" / "config.yaml").write_text(run_config("rouge_l", RougeL(), seed=1, run_id="rl1", lineage=["mle0"]))
    load_script("table4").main([str(tmp_path / "a"), str(tmp_path / "b"), "--metrics", "--out", str(tmp_path)])
    assert "- Mixed w/ ROUGE-L on ROUGE-L" in capsys.readouterr().out


def test_table4_pairs_a_run_with_a_retest_of_its_start(seed_grid, tmp_path, capsys):
    """An MLE run tested again (train=false init_from=its checkpoint, say with another metric) stands for that run:
    the mixed run that started from it pairs with the re-test. A re-test of some other MLE run does not."""
    shutil.copytree(seed_grid / "seed_0" / "mle", tmp_path / "retest")
    (tmp_path / "retest" / "config.yaml").write_text("run_name: mle\nseed: 0\nrun_id: t1\nlineage: [mle0]\ntrain: false\n")
    load_script("table4").main([str(tmp_path / "retest"), str(seed_grid / "seed_0" / "rouge_l"), "--metrics",
                                "--out", str(tmp_path)])
    assert "- Mixed w/ ROUGE-L on ROUGE-L" in capsys.readouterr().out
    (tmp_path / "retest" / "config.yaml").write_text("run_name: mle\nseed: 0\nrun_id: t1\nlineage: [cc1]\ntrain: false\n")
    with pytest.raises(EvaluationRefused, match=r"rouge_l descends from runs mle0 .* none of which is a MLE\+Pgen"):
        load_script("table4").main([str(tmp_path / "retest"), str(seed_grid / "seed_0" / "rouge_l"), "--metrics",
                                    "--out", str(tmp_path)])


def test_table4_refuses_a_run_whose_start_is_not_given(seed_grid, tmp_path):
    """The issue's case: a mixed run started from one MLE run, given beside another MLE run of the same seed."""
    shutil.copytree(seed_grid / "seed_0" / "mle", tmp_path / "other_mle")
    (tmp_path / "other_mle" / "config.yaml").write_text(run_config("mle", seed=0, run_id="cc1", lineage=[]))
    with pytest.raises(EvaluationRefused, match=r"rouge_l descends from runs mle0 .* none of which is a MLE\+Pgen"):
        load_script("table4").main([str(tmp_path / "other_mle"), str(seed_grid / "seed_0" / "rouge_l"), "--metrics",
                                    "--out", str(tmp_path)])


def test_table4_refuses_two_runs_of_one_name_and_seed(seed_grid, tmp_path):
    shutil.copytree(seed_grid / "seed_0" / "mle", tmp_path / "cc1")
    with pytest.raises(EvaluationRefused, match=r"seed_0/mle and .*cc1 are both 'MLE\+Pgen \(no reward\)' with seed 0"):
        load_script("table4").main([str(seed_grid / "seed_0" / "mle"), str(tmp_path / "cc1"),
                                    str(seed_grid / "seed_0" / "rouge_l"), "--metrics", "--out", str(tmp_path)])


def scoring_is_not_reached(*args, **kwargs):
    raise AssertionError("the runs were scored before the flags were checked")


@pytest.mark.parametrize("flags, message", [
    (["--resamples", "0"], "argument --resamples: must be at least 1, got 0"),
    (["--resamples", "-5"], "argument --resamples: must be at least 1, got -5"),
    (["--seed", "-3"], "argument --seed: must be at least 0, got -3"),
    (["--examples", "-3"], "argument --examples: must be at least 0, got -3"),
    (["--metrics", "wmss"], "argument --metrics/--set: no reward config 'wmss': choose from length_only, ls_score, "),
    (["--baseline", "mlee"], "argument --baseline: mlee names none of the runs given (their names: custom, mle, "
                             "rouge_l, s_wms, sms, wms)"),
])
def test_table4_names_the_flag_of_a_bad_value_before_any_scoring(grid, tmp_path, monkeypatch, capsys, flags, message):
    # tracebacks, messages without the flag, or (a misspelt --baseline) exit 0 with no intervals
    table4 = load_script("table4")
    monkeypatch.setattr("evaluation.table.score_run", scoring_is_not_reached)
    with pytest.raises(SystemExit) as stopped:
        table4.main([str(grid), "--metrics", "--out", str(tmp_path), *flags])
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_table4_refuses_a_row_tested_with_another_decoder_than_its_baseline(grid, tmp_path, monkeypatch):
    for name in ("mle", "wms"):
        shutil.copytree(grid / name, tmp_path / "runs" / name)
    config = tmp_path / "runs" / "wms" / "config.yaml"
    config.write_text(config.read_text() + "module:\n  beam: {beam_size: 2, max_len: 100}\n")
    (tmp_path / "runs" / "mle" / "config.yaml").write_text(
        (tmp_path / "runs" / "mle" / "config.yaml").read_text() + "module:\n  beam: {beam_size: 5, max_len: 100}\n")
    monkeypatch.setattr("evaluation.table.score_run", scoring_is_not_reached)
    with pytest.raises(EvaluationRefused, match=r"wms was tested with another decoder than its baseline .*mle "
                                         r"\(module.beam.beam_size: 2 against 5\)"):
        load_script("table4").main([str(tmp_path / "runs"), "--metrics", "--out", str(tmp_path)])


def test_table4_piped_into_a_reader_that_stops_writes_its_files_and_ends_quietly(grid, tmp_path):
    out = tmp_path / "out"
    shell = (f"{sys.executable} {REPO / 'scripts' / 'table4.py'} {grid / 'mle'} {grid / 'rouge_l'} --metrics "
             f"--out {out} --resamples 50 | true")  # a reader gone before the first line is printed
    done = subprocess.run(["bash", "-o", "pipefail", "-c", shell], capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stderr.strip()) == (0, "")
    assert "Mixed w/ ROUGE-L" in (out / "table4.md").read_text() and (out / "table4.json").exists()


def test_table4_refuses_an_out_folder_it_cannot_write_before_any_scoring(grid, tmp_path, monkeypatch):
    # it failed with a PermissionError traceback after all the scoring
    table4 = load_script("table4")
    monkeypatch.setattr("evaluation.table.score_run", scoring_is_not_reached)
    (tmp_path / "a_file").write_text("")
    with pytest.raises(SettingsError, match=rf"^--out: cannot write to {tmp_path / 'a_file' / 'out'} \("):
        table4.main([str(grid), "--metrics", "--out", str(tmp_path / "a_file" / "out")])


def test_table4_names_a_malformed_config_or_summaries_file_in_one_line(grid, tmp_path, monkeypatch):
    shutil.copytree(grid / "mle", tmp_path / "mle")
    table4 = load_script("table4")
    monkeypatch.setattr("sys.argv", ["table4", str(tmp_path / "mle"), "--metrics", "--out", str(tmp_path)])
    (tmp_path / "mle" / "summaries.jsonl").write_text('{"id": "a", "summary": "x .", "reference": ["x ."], '
                                                      '"scores": {}}\n')
    with pytest.raises(SystemExit, match=r"^error: .*mle/summaries\.jsonl:1: field 'reference' must be a string, got "
                                         r'\["x \."\]$'):
        table4.cli()
    (tmp_path / "mle" / "config.yaml").write_text("run_name: mle\ntable: {row: [\n")
    with pytest.raises(SystemExit, match=r"^error: .*mle/config\.yaml: not a run's config \(ParserError: "):
        table4.cli()


def test_table4_names_a_missing_path(tmp_path, monkeypatch):
    with pytest.raises(EvaluationRefused, match=r".*nowhere is not a directory"):
        load_script("table4").main([str(tmp_path / "nowhere"), "--metrics"])
    monkeypatch.setattr(sys, "argv", ["sumrl-table4", str(tmp_path / "nowhere"), "--metrics"])
    with pytest.raises(SystemExit, match=rf"^error: {tmp_path / 'nowhere'} is not a directory \(give run directories"):
        load_script("table4").cli()  # the console command: one line


def test_demo_robustness_counts_grids_whose_whole_diagonal_is_significant(tmp_path, capsys):
    """Two hand-made grids' table4.json: all four significant in one, SMS not in the other."""
    robustness = load_script("demo_robustness")
    for name, sms_low in (("t1_s0", 0.5), ("t2_s0", -0.5)):
        (tmp_path / name).mkdir()
        diagonal = {r: {"row": f"Mixed w/ {r}", "delta": 2.0, "low": 1.0, "high": 3.0, "significant": True,
                        "best_row": r != "wms"} for r in robustness.REWARDS}
        diagonal["sms"] |= {"low": sms_low, "significant": sms_low > 0}
        diagonal["wms"]["equal_length"] = {"delta": 1.0, "low": -0.1 if name == "t1_s0" else 0.1, "high": 2.0,
                                           "significant": name != "t1_s0"}
        for r in ("rouge_l", "sms", "s_wms"):
            diagonal[r]["equal_length"] = {"delta": 1.0, "low": 0.5, "high": 2.0, "significant": True}
        (tmp_path / name / "table4.json").write_text(json.dumps({"diagonal": diagonal}))
    mle = tmp_path / "t2_s0" / "seed_0" / "mle"  # its MLE start: the kept checkpoint is the lowest loss's
    mle.mkdir(parents=True)
    mle.joinpath("val_curve.csv").write_text("step,val/loss,val/length,val/repeated_trigrams\n75,0.61,50.4,0.68\n"
                                             "100,0.44,16.5,0.28\n")
    robustness.main(["--seeds", "0", "--threads", "1", "2", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "robustness.json").read_text())
    assert (data["passed"], data["passed_at_equal_length"], data["total"]) == (1, 1, 2)
    assert data["per_reward"]["sms"] | {} == {"mean_delta": 2.0, "smallest_low": -0.5, "largest_delta": 2.0,
                                               "smallest_delta": 2.0, "significant": 1,
                                               "significant_at_equal_length": 2, "best_row": 2}
    assert data["per_reward"]["wms"]["significant_at_equal_length"] == 1
    assert data["per_reward"]["wms"]["best_row"] == 0
    printed = capsys.readouterr().out
    assert "**1 of 2 grids** have all four diagonals significant" in printed and "| Mixed w/ sms | " in printed
    assert data["mle_starts"] == {"t1_s0": None, "t2_s0": {"step": 100, "tokens": 16.5, "repeated_trigrams": 0.28}}
    assert "| no | yes | 3 of 4 | 100, 16, 0.28 | - |" in printed and "**1 of 2** at equal length" in printed


def test_table4_writes_into_the_sweep_that_holds_the_runs(seed_grid, capsys):
    """A seed's folder inside a sweep: the report goes to the sweep (where multirun.yaml is), not to seed_0/."""
    (seed_grid / "table4.md").unlink(missing_ok=True)
    load_script("table4").main([str(seed_grid / "seed_0"), "--metrics"])
    assert (seed_grid / "table4.md").exists() and not (seed_grid / "seed_0" / "table4.md").exists()


# ---------------------------------------------------------------- a new reward: one class, one YAML

TOY_REWARD = '''
from rewards.base import Display, Reward


class Length(Reward):
    """Longer summaries score higher: tokens / 100, shown ×1000 under "Length"."""

    name, needs_reference = "length", False
    display = Display("Length", 1000)

    def __call__(self, inputs):
        return inputs.hyp_lens.float() / 100
'''


def test_a_new_reward_is_one_class_and_one_yaml_and_table4_shows_it_at_its_scale(tmp_path, monkeypatch, capsys):
    (tmp_path / "toy_reward.py").write_text(TOY_REWARD)
    (tmp_path / "my_conf" / "reward").mkdir(parents=True)
    (tmp_path / "my_conf" / "reward" / "length.yaml").write_text("_target_: toy_reward.Length\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reward = compose_rewards(["length"], config_dirs=[tmp_path / "my_conf"])["length"]
    # two runs as training writes them: MLE, and a mixed run trained with the new reward, started from it
    runs = {"mle": (None, ["a b .", "a b c d ."], []), "length": (reward, ["a b c .", "a b c d e f ."], ["m"])}
    for name, (trained_with, summaries, lineage) in runs.items():
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "config.yaml").write_text(
            run_config(name, trained_with, run_id=name[0], lineage=lineage))
        write_jsonl(tmp_path / "runs" / name / "summaries.jsonl", [
            {"id": f"a{i}", "summary": s, "reference": "a b c .", "scores": {}} for i, s in enumerate(summaries)])
    # as the README orders it: --metrics's names, then the runs (argparse handed them to --metrics)
    load_script("table4").main(["--config-dir", str(tmp_path / "my_conf"), "--metrics", "length",
                                str(tmp_path / "runs"), "--resamples", "20", "--out", str(tmp_path)])
    report = capsys.readouterr().out
    header, _, mle, mixed = report.splitlines()[:4]
    assert header.endswith("| Length | tokens |")
    # tokens (the final '.' included) / 100, ×1000: MLE (3 + 5) / 2 · 10 = 40, the new reward's run (4 + 7) / 2 · 10
    assert mle.startswith("| MLE+Pgen (no reward) |") and mle.endswith("| 40.00 | 4.00 |")
    assert mixed.startswith("| Mixed w/ Length |") and mixed.endswith("| 55.00 | 5.50 |")
    assert "- Mixed w/ Length on Length: 40.00 → 55.00 (+15.00 [" in report
    # a reward of length alone gains nothing at equal length: +10 and +20 for one and two more tokens
    assert "; at equal length +0.00 [" in report


def test_table4_refuses_to_score_an_article_reading_metric_without_the_article(tmp_path, monkeypatch):
    """summaries.jsonl keeps no article: a metric that reads one is taken from the run's test scores or refused,
    never computed against an empty article."""
    (tmp_path / "toy_article_reward.py").write_text(
        "from rewards.base import Display, Reward\n\n\nclass Overlap(Reward):\n    name, needs_reference = 'overlap', False\n"
        "    display = Display('Overlap', 100, reads_article=True)\n\n"
        "    def __call__(self, inputs):\n        return inputs.hyp_lens.float() * 0\n")
    (tmp_path / "my_conf" / "reward").mkdir(parents=True)
    (tmp_path / "my_conf" / "reward" / "overlap.yaml").write_text("_target_: toy_article_reward.Overlap\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, reward, lineage, stored in (("mle", None, [], 0.5), ("rouge_l", RougeL(), ["m"], None)):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "config.yaml").write_text(run_config(name, reward, run_id=name[0], lineage=lineage))
        write_jsonl(tmp_path / "runs" / name / "summaries.jsonl", [
            {"id": "a0", "summary": "a b .", "reference": "a b c .",
             "scores": {} if stored is None else {"overlap": stored}}])
    with pytest.raises(EvaluationRefused, match=r"^overlap reads the article, which .*rouge_l/summaries.jsonl does "
                                         r"not keep"):
        load_script("table4").main([str(tmp_path / "runs"), "--metrics", "overlap", "--config-dir",
                                    str(tmp_path / "my_conf"), "--resamples", "20", "--out", str(tmp_path)])


# ---------------------------------------------------------------- compare_sweeps.py

def write_sweep_run(root: Path, seed: int, batch_size: int, summaries: list[str], references: list[str],
                    curve: list[tuple[int, float]]) -> None:
    run = root / f"seed_{seed}" / "rouge_l"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(run_config("rouge_l", RougeL(), seed=seed, data={"batch_size": batch_size}))
    write_jsonl(run / "summaries.jsonl", [{"id": f"art-{i:02d}", "summary": s, "reference": r, "scores": {}}
                                          for i, (s, r) in enumerate(zip(summaries, references))])
    (run / "val_curve.csv").write_text("step,val/test_metric\n" + "".join(f"{s},{v}\n" for s, v in curve))


def test_compare_sweeps_names_itself_and_refuses_one_sweep_given_as_both(tmp_path):
    # its errors said "table4:", and --a X --b X printed +0.00 for every run
    write_sweep_run(tmp_path / "a", 0, 16, ["the river ."] * 3, ["the river ."] * 3, [(0, 40.0)])
    compare_sweeps = load_script("compare_sweeps")
    with pytest.raises(SystemExit, match=rf"^compare_sweeps: --a and --b both give {tmp_path / 'a'}/seed_0/rouge_l: "
                                         "compare two sweeps$"):
        compare_sweeps.main(["--a", str(tmp_path / "a"), "--b", str(tmp_path / "a"), "--out", str(tmp_path / "out")])
    with pytest.raises(EvaluationRefused, match=r".*nowhere is not a directory"):
        compare_sweeps.main(["--a", str(tmp_path / "nowhere"), "--b", str(tmp_path / "a"), "--out", str(tmp_path)])


def test_compare_sweeps_pairs_runs_by_name_and_seed(tmp_path, capsys):
    """Sweep B's seed-0 run is perfect where A's gets half of each reference; seed 1 is the same in both (and not
    seed 0's). The difference is the rouge-score one, significant for seed 0 only; the curves are drawn against
    examples seen."""
    from rouge_score import rouge_scorer
    rng = np.random.default_rng(0)
    references = [" ".join(rng.choice(WORDS, size=6, replace=False)) + " ." for _ in range(30)]
    half = [" ".join(r.split()[:3] + UNRELATED[:3]) + " ." for r in references]
    third = [" ".join(r.split()[:2] + UNRELATED[:4]) + " ." for r in references]
    write_sweep_run(tmp_path / "a", 0, 16, half, references, [(0, 40.0), (25, 50.0), (50, 55.0)])
    write_sweep_run(tmp_path / "a", 1, 16, third, references, [(0, 40.0), (25, 45.0), (50, 50.0)])
    write_sweep_run(tmp_path / "b", 0, 32, references, references, [(0, 40.0), (12, 60.0), (25, 70.0)])
    write_sweep_run(tmp_path / "b", 1, 32, third, references, [(0, 40.0), (12, 49.0), (25, 54.0)])
    load_script("compare_sweeps").main(["--a", str(tmp_path / "a" / "seed_0"), str(tmp_path / "a" / "seed_1"),
                                        "--b", str(tmp_path / "b" / "seed_0"), str(tmp_path / "b" / "seed_1"),
                                        "--labels", "batch 16", "batch 32", "--out", str(tmp_path / "out")])
    report = capsys.readouterr().out
    assert report.strip() == (tmp_path / "out" / "compare.md").read_text().strip()
    row = next(line for line in report.splitlines() if line.startswith("| Mixed w/ ROUGE-L"))
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    gain = np.mean([100 - 100 * scorer.score(r, h)["rougeL"].fmeasure for r, h in zip(references, half)])
    cells = row.strip("| ").split(" | ")
    assert cells[:3] == ["Mixed w/ ROUGE-L", "rougeL", "2"]
    assert float(cells[4]) - float(cells[3]) == pytest.approx(gain / 2, abs=0.01)
    seed_0, seed_1 = cells[6].split("; ")
    assert seed_0.startswith(f"0: +{gain:.2f} [") and seed_0.endswith("]*")
    assert seed_1 == "1: +0.00 [+0.00, +0.00]"
    assert (tmp_path / "out" / "compare_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table4_shows_the_lead3_and_each_rows_greedy_decodes_beside_its_beam(tmp_path, capsys):
    """Runs tested with greedy decodes beside the beam: the ROUGE-L run's beam equals MLE's, while its greedy decodes
    are the references where MLE's greedy decodes repeat a sentence; table4 shows that gap (greedy +Δ, beam 0), both
    decoders' lengths and repeats, and a Lead-3 row scored from the MLE run's lead-3 as rouge-score scores it."""
    references = [f"the {a} met the {b} ." for a, b in zip(WORDS[:20], WORDS[5:25])]
    leads = [f"the {a} saw the {b} .\nit rained .\nthe end ." for a, b in zip(WORDS[:20], WORDS[5:25])]
    repeated = [f"the {a} met the {a} met the {a} met ." for a in WORDS[:20]]
    for name, greedy in (("mle", repeated), ("rouge_l", references)):
        run = tmp_path / name
        run.mkdir()
        (run / "config.yaml").write_text(run_config(name, REWARDS[name]))
        write_jsonl(run / "summaries.jsonl", [
            {"id": f"a{i}", "summary": f"the {WORDS[i]} met .", "reference": r, "scores": {}, "tokens": 4,
             "repeated_trigrams": 0.0, "greedy": {"summary": g, "scores": {}}, "lead3": lead}
            for i, (r, g, lead) in enumerate(zip(references, greedy, leads))])
    load_script("table4").main([str(tmp_path), "--metrics", "--out", str(tmp_path)])
    report = capsys.readouterr().out
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    lead_rouge = np.mean([100 * scorer.score(r, lead)["rougeL"].fmeasure for r, lead in zip(references, leads)])
    lead_row = next(line for line in report.splitlines() if line.startswith("| Lead-3 |"))
    assert lead_row.split(" | ")[3] == f"{lead_rouge:.2f}"
    greedy_rouge = np.mean([100 * scorer.score(r, g)["rougeL"].fmeasure for r, g in zip(references, repeated)])
    line = next(line for line in report.splitlines() if line.startswith("- Mixed w/ ROUGE-L on ROUGE-L: greedy"))
    assert line.startswith(f"- Mixed w/ ROUGE-L on ROUGE-L: greedy +{100 - greedy_rouge:.2f} ")
    assert line.endswith("beam +0.00 [+0.00, +0.00]; greedy tokens -4.00 [-4.00, -4.00], repeated trigrams -0.50 "
                         "[-0.50, -0.50]")
    table = json.loads((tmp_path / "table4.json").read_text())
    assert table["Mixed w/ ROUGE-L"]["greedy"]["repeated_trigrams"] == 0
    assert table["MLE+Pgen (no reward)"]["greedy"]["repeated_trigrams"] == pytest.approx(4 / 8)
    assert table["Lead-3"]["rougeL"] == pytest.approx(lead_rouge)
