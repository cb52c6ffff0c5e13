"""Property-based tests (hypothesis): every configured reward stays in its range on any text, and the local
file loaders answer garbage with an error naming the line, never a traceback of another type."""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from models.text.records import DataError
from models.text.vocab import Vocabulary
from rewards.base import RewardInput, WeightedSum
from rewards.ls_score import LSConfig, LSScore, LSScorer, load_encoder
from rewards.mover import MoverSimilarity
from rewards.scoring import hypothesis_tokens, tokenize
from rewards.configs import compose_rewards
from trainer.data import SummarizationData
from trainer.sources import LocalFile

CONF = Path(__file__).resolve().parents[1] / "conf" / "reward"
REWARDS = sorted(p.stem for p in CONF.glob("*.yaml") if "_target_" in OmegaConf.load(p))
# few examples, no deadline: each example scores a batch with exact EMD, and GloVe loads once per module
FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

WORDS = st.sampled_from("the cat sat on a mat . snow boston ! of , it is zzyzx über naïve 89 ? --".split())
TEXTS = st.one_of(
    st.text(),  # any unicode (hypothesis leaves out lone surrogates, which the loaders reject)
    st.text(alphabet=" \t\n\r\u00a0\u2028", max_size=12),  # empty or whitespace only
    st.lists(WORDS, max_size=600).map(" ".join),  # long; stopwords only; sentences of any length
    st.tuples(WORDS, st.integers(1, 300)).map(lambda pair: " ".join([pair[0]] * pair[1])),  # one word repeated
)


@pytest.fixture(scope="module")
def rewards(tiny_qa_model, tmp_path_factory):
    # ls_score reads a trained evaluator from the user's cache: an untrained one on the tiny encoder stands in
    ls_score = tmp_path_factory.mktemp("ls_score")
    LSScorer(load_encoder(tiny_qa_model)[1], LSConfig(encoder=tiny_qa_model)).save(ls_score)
    with pytest.MonkeyPatch.context() as env:  # the QA rewards' model (conf/qa/default.yaml)
        env.setenv("SUMRL_QA_MODEL", tiny_qa_model)
        env.setenv("SUMRL_LS_SCORE", str(ls_score))
        return compose_rewards(REWARDS)


def value_range(reward) -> tuple[float, float]:
    """Where a reward's values lie by its definition: LS-Score's L, a mean log-probability, is at most 0 and unbounded
    below, and its S is a cosine, in [-1, 1]; a weighted sum's range follows from its terms'; the others lie in
    [0, 1]."""
    if isinstance(reward, WeightedSum):
        parts = [(reward.weights[k] * low, reward.weights[k] * high)
                 for k, (low, high) in ((k, value_range(term)) for k, term in reward.terms.items())]
        return sum(min(p) for p in parts), sum(max(p) for p in parts)
    if isinstance(reward, LSScore):
        alpha, beta = reward.scorer.config.alpha, reward.scorer.config.beta
        return -float("inf") if alpha > 0 else -beta, beta
    return 0.0, 1.0


@pytest.mark.parametrize("name", REWARDS)
@FEW
@given(pairs=st.lists(st.tuples(TEXTS, st.none() | TEXTS), min_size=1, max_size=4))
def test_rewards_stay_in_range_on_any_text(rewards, name, pairs):
    hyps = [hypothesis_tokens(tokenize(candidate, "treebank")) for candidate, _ in pairs]
    refs = [None if reference is None else tokenize(reference, "treebank") for _, reference in pairs]
    words = sorted({t for h in hyps for t in h} | {t for r in refs if r for s in r for t in s})
    # the reference, or else the candidate, as the article that the QA rewards ask about
    inputs = RewardInput.from_texts(hyps, refs, Vocabulary(words), source_texts=[r or c for c, r in pairs])
    reward = rewards[name]
    values = reward(inputs)
    low, high = value_range(reward)
    in_range = (values >= low - 1e-5) & (values <= high + 1e-5)  # a cosine of identical vectors rounds to 1 + ε
    if isinstance(reward, MoverSimilarity):
        hyp_content, ref_content = (torch.from_numpy(reward.embeddings.embed_batch(inputs, side).keep.any(1))
                                    for side in ("hyp", "ref"))
        assert (values[~hyp_content] == 0).all()  # an empty hypothesis scores 0, whatever the reference
        in_range |= values.isnan() & ~ref_content  # an empty reference: the example does not apply
    assert in_range.all(), values


GARBAGE_LINES = st.one_of(
    st.binary(max_size=40),  # invalid UTF-8, NUL bytes, stray quotes and commas
    st.text(max_size=40).map(str.encode),
    st.text(st.characters(categories=["Cs"]), min_size=1, max_size=2).map(  # JSON-escaped lone surrogates
        lambda s: json.dumps({"article": s, "highlights": "x"}).encode()),
    st.dictionaries(st.sampled_from(["id", "article", "highlights"]),
                    st.none() | st.booleans() | st.integers() | st.text(max_size=20) | st.lists(st.integers()),
                    ).map(lambda row: json.dumps(row).encode()),
)


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
@FEW
@given(lines=st.lists(GARBAGE_LINES, max_size=6))
def test_loaders_answer_garbage_with_an_error_naming_the_line(tmp_path, suffix, lines):
    path = tmp_path / f"garbage.{suffix}"
    path.write_bytes(b"\n".join(lines))
    source = LocalFile(str(path))
    try:  # the whole setup: a lone surrogate used to fail only in the vocabulary's hash
        SummarizationData(source, source, source, cache_dir=str(tmp_path / "cache")).setup()
    except DataError as error:  # any other exception type fails the test with its traceback
        assert re.match(rf"{re.escape(str(path))}(:\d+: |: no usable records)", str(error)), str(error)


# ---------------------------------------------------------------- readers of malformed files (issue 41)

READS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
BOM = "\ufeff".encode()
JSON_VALUES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12) | st.lists(
    st.integers(), max_size=2)


def assert_one_line_naming(error: Exception, path: Path) -> None:
    assert isinstance(error, DataError) and "\n" not in str(error), repr(error)
    assert str(error).startswith(f"{path}:") or str(error).startswith(f"{path}: "), str(error)


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
@READS
@given(rows=st.lists(st.tuples(st.text(max_size=12), st.text(max_size=30), st.text(max_size=20)), min_size=1,
                     max_size=5), bom=st.booleans())
def test_loaders_read_any_well_formed_file_as_written(tmp_path, suffix, rows, bom):
    # A spreadsheet's byte order mark made the CSV's `id` another field: the ids became row numbers, silently.
    path = tmp_path / f"data.{suffix}"
    fields = ("id", "article", "highlights")
    if suffix == "csv":
        text = io.StringIO()
        csv.writer(text).writerows([fields, *rows])
        text = text.getvalue()
    else:
        text = "".join(json.dumps(dict(zip(fields, row))) + "\n" for row in rows)
    path.write_bytes((BOM if bom else b"") + text.encode())
    try:
        records = [(r.id, r.article, r.summary) for r in LocalFile(str(path)).records()]
    except DataError as error:  # a NUL in a CSV value, which the csv module refuses
        assert_one_line_naming(error, path)
        return
    assert records == rows


SUMMARY_LINES = st.one_of(
    GARBAGE_LINES,
    st.fixed_dictionaries({"id": JSON_VALUES, "summary": JSON_VALUES, "reference": JSON_VALUES,
                           "scores": JSON_VALUES | st.dictionaries(st.sampled_from(["wms", "qa_conf"]), JSON_VALUES)}),
    st.fixed_dictionaries({"id": st.text(max_size=4), "summary": st.text(max_size=40), "reference": st.text(max_size=40),
                           "scores": st.dictionaries(st.sampled_from(["qa_conf"]), st.floats(0, 1) | st.none())}),
).map(lambda line: line if isinstance(line, bytes) else json.dumps(line).encode())


@READS
@given(lines=st.lists(SUMMARY_LINES, max_size=5))
def test_table4_reads_any_summaries_file_as_written_or_names_its_bad_line(tmp_path, lines):
    from evaluation.runs import EvaluationRefused, Run, read_summaries
    from evaluation.scoring import score_run
    path = tmp_path / "summaries.jsonl"
    content = b"\n".join(lines)
    path.write_bytes(content)
    try:
        rows = read_summaries(tmp_path)
    except DataError as error:
        assert_one_line_naming(error, path)
        return
    written = [json.loads(line) for line in content.decode().split("\n") if line.strip()]
    assert rows == [{key: row[key] for key in ("id", "summary", "reference", "scores")} for row in written]
    try:  # scored as table4 scores it: its means, or a refusal of repeated ids
        means, _ = score_run(Run(tmp_path, "run", "row"), {})
    except EvaluationRefused as refusal:
        assert str(refusal).startswith(f"{path} repeats article ids"), refusal
        return
    assert means["n"] == len(rows) and 0 <= means["rougeL"] <= 100


@READS
@given(text=st.text(max_size=80) | st.lists(st.sampled_from(["run_name: a", "table:", "  row: [", "seed: 1", "- x",
                                                               "table: 5", "{", ": :", "train: false"]), max_size=4
                                            ).map("\n".join))
def test_table4_reads_any_config_yaml_or_names_it(tmp_path, text):
    from evaluation.runs import Run
    (tmp_path / "config.yaml").write_text(text, encoding="utf-8")
    try:
        run = Run.read(tmp_path)
    except DataError as error:
        assert_one_line_naming(error, tmp_path / "config.yaml")
        return
    assert isinstance(run, Run) and run.path == tmp_path
