"""The meta-evaluation harness: input-level pairwise system differences (Toutanova et al. 2016 §4.3.2), dominance,
system level, ROUGE-N (clipped and distinct, as the `rouge` package counts) and the Chaganty regression."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from models.text.records import DataError
from models.text.vocab import Vocabulary
from rewards.base import RewardInput
from rewards.correlation import dominance, input_level_pairs, system_level, williams_test
from rewards.msr_compression import RATING_CODES, judged_rows, read_msr
from rewards.rouge import RougeN, multi_reference_recall
from rewards.scoring import tokenize
from scripts.cli import InputError
from test_scripts import load_script

CHAGANTY = Path("/work/shared/data/human/chaganty2018_cnndm.jsonl")


# ---------------------------------------------------------------- pairwise protocol
def test_input_level_pairs_against_numpy_differences():
    rng = np.random.default_rng(0)
    n, systems = 12, ["a", "b", "c"]
    human = {s: rng.normal(size=n) for s in systems}
    m1 = {s: human[s] + rng.normal(scale=0.5, size=n) for s in systems}
    m2 = {s: rng.normal(size=n) for s in systems}
    # rows in a shuffled order, input ids as strings: the function must pair them by input, not by position
    rows = [(f"doc{i}", s) for s in systems for i in range(n)]
    order = rng.permutation(len(rows))
    rows = [rows[k] for k in order]
    inputs, row_systems = [r[0] for r in rows], [r[1] for r in rows]
    value = lambda table: [table[s][int(i[3:])] for i, s in rows]  # noqa: E731
    pairs = input_level_pairs(inputs, row_systems, value(human), {"m1": value(m1), "m2": value(m2)})
    assert list(pairs) == [("a", "b"), ("a", "c"), ("b", "c")]
    for a, b in pairs:
        dh, d1, d2 = human[a] - human[b], m1[a] - m1[b], m2[a] - m2[b]
        r1, r2, r12 = stats.pearsonr(d1, dh)[0], stats.pearsonr(d2, dh)[0], stats.pearsonr(d1, d2)[0]
        assert pairs[a, b]["n"] == n
        assert pairs[a, b]["pearson"]["m1"] == pytest.approx(r1)
        assert pairs[a, b]["pearson"]["m2"] == pytest.approx(r2)
        assert pairs[a, b]["williams"]["m1", "m2"] == pytest.approx(williams_test(r1, r2, r12, n)[1])


def test_input_level_pairs_use_only_inputs_of_both_systems():
    # doc3 lacks system b: the pair (a, b) has 3 inputs, and a constant difference has no correlation (NaN)
    inputs = ["d1", "d2", "d3", "d1", "d2"]
    systems = ["a", "a", "a", "b", "b"]
    pairs = input_level_pairs(inputs, systems, [1.0, 2.0, 3.0, 0.0, 0.0], {"m": [5.0, 5.0, 5.0, 1.0, 1.0]})
    assert pairs["a", "b"]["n"] == 2
    assert math.isnan(pairs["a", "b"]["pearson"]["m"])


def test_dominance_needs_80_percent_of_pairs():
    def result(p12: float) -> dict:
        return {"n": 10, "pearson": {"x": 0.5, "y": 0.1}, "williams": {("x", "y"): p12, ("y", "x"): 1 - p12}}
    four_of_five = {(str(k), "s"): result(p) for k, p in enumerate([0.01, 0.04, 0.001, 0.02, 0.5])}
    three_of_five = {(str(k), "s"): result(p) for k, p in enumerate([0.01, 0.04, 0.06, 0.02, math.nan])}
    assert dominance(four_of_five)["x", "y"] == (4, True)
    assert dominance(four_of_five)["y", "x"] == (0, False)
    assert dominance(three_of_five)["x", "y"] == (3, False)  # p = 0.06 and an undefined test do not count


def test_system_level_correlates_system_means():
    # means: human a=1, b=2, c=6; metric a=10, b=5, c=20 -> ranks (1,2,3) vs (2,1,3)
    systems = ["a", "a", "b", "b", "c"]
    human = [0.0, 2.0, 1.0, 3.0, 6.0]
    metric = [10.0, 10.0, 4.0, 6.0, 20.0]
    result = system_level(systems, human, {"m": metric}, "spearman")
    assert result["m"] == pytest.approx(0.5)  # 1 − 6·(1 + 1 + 0)/(3·8)
    assert system_level(systems, human, {"m": metric}, "pearson")["m"] == pytest.approx(
        np.corrcoef([1, 2, 6], [10, 5, 20])[0, 1])


# ---------------------------------------------------------------- ROUGE-N
def rouge_n(hyp: str, ref: str, **kwargs) -> float:
    words = sorted(set(hyp.split()) | set(ref.split()))
    inputs = RewardInput.from_texts([hyp.split()], [[ref.split()]], Vocabulary(words))
    return float(RougeN(**kwargs)(inputs)[0])


def test_rouge_n_hand_computed():
    hyp, ref = "the cat the cat", "the cat sat on the mat"
    # clipped: the min(2, 2) + cat min(2, 1) = 3 of 6 reference unigrams; distinct: {the, cat} of 5 types
    assert rouge_n(hyp, ref, n=1) == pytest.approx(3 / 6)
    assert rouge_n(hyp, ref, n=1, distinct=True) == pytest.approx(2 / 5)
    assert rouge_n(hyp, ref, n=1, measure="precision") == pytest.approx(3 / 4)
    # bigrams: hyp {the cat: 2, cat the: 1}, ref 5 bigrams with "the cat" once: 1 match
    assert rouge_n(hyp, ref, n=2) == pytest.approx(1 / 5)
    assert rouge_n(hyp, ref, n=2, measure="f1") == pytest.approx(2 * (1 / 3) * (1 / 5) / (1 / 3 + 1 / 5))


def test_rouge_package_tokenizer_keeps_case_and_splits_on_dots():
    assert tokenize("The U.S. economy.  Grew 2.5 %", "rouge_package") == [
        ["The", "U", "S", "economy", "Grew", "2", "5", "%"]]


# ---------------------------------------------------------------- the script
def test_correlate_systems_keep_complete_inputs_and_the_last_duplicate(tmp_path, capsys):
    words = "alpha bravo charlie delta echo foxtrot golf hotel".split()
    rows = []
    for doc in range(6):
        for k, system in ((doc % 4 + 1, "x"), (8 - doc % 4, "y")):  # y always shares more words: judged higher
            rows.append({"doc": doc, "system": system, "candidate": " ".join(words[:k]), "reference": " ".join(words),
                         "overall": k})
    rows[1]["overall"] = -5  # doc 0's first y row is misjudged; a later row replaces it
    rows.append({"doc": 0, "system": "y", "candidate": "zulu", "reference": " ".join(words), "overall": 0})
    rows.append({"doc": 9, "system": "x", "candidate": "alpha", "reference": " ".join(words), "overall": 1})  # no y
    path = tmp_path / "judged.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = load_script("correlate").main([
        str(path), "--human", "overall", "--input-field", "doc", "--systems", "x", "y", "--rewards", "rouge_1_recall",
        "--tokenize", "whitespace", "--protocol", "summary", "pairs", "system"])
    printed = capsys.readouterr().out
    assert "## overall (n = 12)" in printed  # 6 complete docs × 2 systems; doc 9 dropped
    assert "| x − y (n = 6) |" in printed
    assert results["overall"]["rouge_1_recall"]["pearson"] == pytest.approx(1.0)  # recall k/8, judged k
    assert "## overall: system level (2 systems)" in printed
    with pytest.raises(InputError, match=r"judged.jsonl: --protocol system correlates per-system means, and "
                                         r"'overall' is judged for 1 system \(system\): it needs at least 2"):
        load_script("correlate").main([str(path), "--human", "overall", "--input-field", "doc", "--systems", "x",
                                       "--rewards", "rouge_1_recall", "--tokenize", "whitespace", "--protocol", "system"])


@pytest.mark.slow
@pytest.mark.skipif(not CHAGANTY.exists(), reason="needs the shared Chaganty et al. judgments")
def test_wu_rouge_1_recall_regression():
    # Wu et al. (2020) Table 1: ROUGE-1 .1953 / .0975 / .2174 on the 1,996 summaries of the 499 fully judged docs
    results = load_script("correlate").main([
        str(CHAGANTY), "--human", "overall", "grammar", "redundancy", "--input-field", "doc_id",
        "--systems", "seq2seq", "pointer", "ml", "ml+rl", "--rewards", "rouge_1_recall", "--tokenize", "rouge_package"])
    for dim, paper in (("overall", 0.1953), ("grammar", 0.0975), ("redundancy", 0.2174)):
        assert results[dim]["rouge_1_recall"]["spearman"] == pytest.approx(paper, abs=0.005)


# ---------------------------------------------------------------- multi-reference ROUGE-N recall
def test_multi_reference_recall_toutanova_example():
    # §4.1: R1 "imagine your household", R2 "your household"; bigram vectors R1 {imagine your, your household},
    # R2 {your household}; MULT-ALL = R1's; MULT-PROB {imagine your: .5, your household: 1}
    refs = ["imagine your household".split(), "your household".split()]
    out = "your household".split()
    assert multi_reference_recall(out, refs, 2, "max") == pytest.approx(1.0)  # R2 alone: 1/1
    assert multi_reference_recall(out, refs, 2, "all") == pytest.approx(1 / 2)
    assert multi_reference_recall(out, refs, 2, "prob") == pytest.approx(1 / 1.5)
    assert multi_reference_recall("imagine your".split(), refs, 2, "prob") == pytest.approx(0.5 / 1.5)


def test_multi_reference_recall_counts_repeated_units_separately():
    # footnote 8: the i-th "the" of the output matches the i-th "the" of a reference. Unigram units:
    # the#1 (both refs: 1), the#2 (one ref: .5), cat#1 (.5), dog#1 (.5); |Φ|₁ = 2.5
    refs = ["the the cat".split(), "the dog".split()]
    assert multi_reference_recall("the the".split(), refs, 1, "prob") == pytest.approx(1.5 / 2.5)
    assert multi_reference_recall("the".split(), refs, 1, "prob") == pytest.approx(1 / 2.5)
    assert multi_reference_recall("the the".split(), refs, 1, "max") == pytest.approx(2 / 3)  # vs R1: 2 of 3


def test_correlate_scores_multi_reference_recall_of_each_row(tmp_path, capsys):
    # two references per row; human scores chosen as the hand-computed MULT-PROB bigram recall (Toutanova §4.1)
    refs = ["imagine your household", "your household"]
    candidates = {"your household": (1.0, 1 / 2, 1 / 1.5), "imagine your": (0.5, 1 / 2, 0.5 / 1.5),
                  "imagine your household": (1.0, 1.0, 1.0), "my house": (0.0, 0.0, 0.0)}
    rows = [{"input": f"s{i}", "system": "t3", "candidate": c, "reference": refs[0], "references": refs,
             "combined": prob} for i, (c, (_, _, prob)) in enumerate(candidates.items())]
    path = tmp_path / "judged.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = load_script("correlate").main([str(path), "--human", "combined", "--rewards", "rouge_1_recall",
                                             "--multi-reference", "2", "--multi-reference-tokenize", "whitespace",
                                             "--tokenize", "whitespace"])
    assert "| rouge_2_mult_prob |" in capsys.readouterr().out
    mult = {m: [v[i] for v in candidates.values()] for i, m in enumerate(("max", "all", "prob"))}
    for method, values in mult.items():
        assert results["combined"][f"rouge_2_mult_{method}"]["pearson"] == pytest.approx(
            stats.pearsonr(values, [r["combined"] for r in rows])[0])
    assert results["combined"]["rouge_2_mult_prob"]["pearson"] == pytest.approx(1.0)


def test_correlate_names_the_row_whose_references_are_not_a_list(tmp_path):
    path = tmp_path / "judged.jsonl"
    path.write_text(json.dumps({"candidate": "a", "reference": "a", "references": "a", "combined": 1}) + "\n")
    with pytest.raises(DataError, match=f"{path}:1: field 'references' must be a non-empty list of strings"):
        load_script("correlate").main([str(path), "--human", "combined", "--rewards", "rouge_1_recall",
                                       "--multi-reference", "1"])


# ---------------------------------------------------------------- the MSR compression reader
def test_rating_codes_table():
    # the release's table: code -> (meaning, grammar); all nine pairs of {1, 2, 3}², each once
    assert RATING_CODES == {6: (3, 3), 7: (3, 2), 9: (3, 1), 11: (2, 3), 12: (2, 2), 14: (2, 1),
                            21: (1, 3), 22: (1, 2), 24: (1, 1)}
    assert sorted(RATING_CODES.values()) == [(m, g) for m in (1, 2, 3) for g in (1, 2, 3)]


MSR_LINES = [
    "S1\tNews\tThe quick brown fox jumped over the lazy dog yesterday. ||| A fox jumped over a dog.\tJ7\t3\t6\t12\t21"
    " ||| The fox jumped.\tJ9\t0",
    "S2\tLetters\tDear sir, we regret to inform you. ||| We regret.\tJ1\t2\t7\t24",
]


def write_msr(path: Path, lines: list[str]) -> Path:
    path.write_bytes(("\ufeff" + "\n".join(lines) + "\n").encode("utf-8"))  # UTF-8 with a BOM, as released
    return path


def test_read_msr_synthetic_fixture(tmp_path):
    sources = read_msr(write_msr(tmp_path / "test.tsv", MSR_LINES))
    assert [s.id for s in sources] == ["S1", "S2"]  # the BOM is not part of the first id
    first = sources[0].compressions[0]
    assert sources[0].domain == "News" and first.text == "A fox jumped over a dog." and first.judge == "J7"
    # codes 6, 12, 21: meaning (3, 2, 1), grammar (3, 2, 3)
    assert first.ratings == ((3, 3), (2, 2), (1, 3))
    assert first.meaning == pytest.approx(2.0) and first.grammar == pytest.approx(8 / 3)
    assert first.combined == pytest.approx(0.5 * 2.0 + 0.5 * 8 / 3)
    assert sources[0].compressions[1].ratings == () and sources[0].compressions[1].meaning is None
    assert sources[1].compressions[0].ratings == ((3, 2), (1, 1))


@pytest.mark.parametrize("bad, message", [
    ("S3\tNews\tA source. ||| A.\tJ1\t2\t6", "3: field numRatings says 2 ratings, found 1"),
    ("S3\tNews\tA source. ||| A.\tJ1\t1\t8", "3: field Rating '8' is not a rating code"),
    ("S3\tNews\tA source.", "3: no '|||' compression"),
])
def test_read_msr_names_file_and_line_of_a_malformed_line(tmp_path, bad, message):
    path = write_msr(tmp_path / "test.tsv", MSR_LINES + [bad])
    with pytest.raises(DataError, match=f"{path}:{message}"):
        read_msr(path)


def test_judged_rows_pair_system_outputs_with_crowd_references(tmp_path):
    references = read_msr(write_msr(tmp_path / "test.tsv", MSR_LINES))
    system = read_msr(write_msr(tmp_path / "test_output.t3.tsv", ["S1\tNews\tThe quick ... ||| Fox.\tt3\t1\t9"]))
    (row,) = judged_rows(references, {"t3": system})
    assert row["references"] == ["A fox jumped over a dog.", "The fox jumped."]
    assert (row["input"], row["system"], row["meaning"], row["grammar"], row["combined"]) == ("S1", "t3", 3, 1, 2)
