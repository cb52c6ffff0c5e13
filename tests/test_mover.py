import math
import random
from collections import Counter
from pathlib import Path

import numpy as np
import ot
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from models.text.vocab import Vocabulary
from rewards.base import RewardInput, WeightedSum
from rewards.embeddings import STOPWORDS, GloveEmbeddings, WordVectors
from rewards.mover import SentenceMoverSimilarity, SentenceWordMoverSimilarity, WordMoverSimilarity
from rewards.rouge import RougeL
from trainer.evaluate import evaluate

MOVERS = [WordMoverSimilarity, SentenceMoverSimilarity, SentenceWordMoverSimilarity]
CONF = Path(__file__).resolve().parents[1] / "conf" / "reward"

# A made-up 2-d table for hand-computable transport problems.
PLANE = {"cat": [0.0, 0.0], "dog": [0.0, 4.0], "fish": [3.0, 4.0]}


def word_table(vectors):
    """Type-based vectors from a word → vector dict."""
    return WordVectors(list(vectors), np.array(list(vectors.values()), dtype=np.float32))


def rng_table(words, dim=8, seed=0):
    rng = np.random.default_rng(seed)
    return {w: rng.normal(size=dim).tolist() for w in words}


CONTENT = "snow boston man selling online box ship pounds styrofoam customers states warmer cat dog".split()
TABLE = rng_table(CONTENT)
NOISE = ["the", "a", "of", "is", "in", ",", "$", "89", "zzyzx", "Boston", "Snow"]  # stopwords, punctuation,
# numbers, a word without a vector, capitalised words (looked up lower-cased)


def split_sentences(tokens):
    sentences, current = [], []
    for t in tokens:
        current.append(t)
        if t in (".", "!", "?"):
            sentences.append(current)
            current = []
    return sentences + ([current] if current else [])


def content_words(sentence, vectors):
    return [w.lower() for w in sentence if w.isalpha() and w.lower() not in STOPWORDS and w.lower() in vectors]


def reference_similarity(hyp_sentences, ref_sentences, vectors, kind):
    """Clark et al. Eq. 1-5 per pair, straight from text: POT with the Euclidean ground distance."""
    word_mass = {"wms": 1.0, "sms": 0.0, "s_wms": 0.5}[kind]

    def bag(sentences):
        sentences = [content_words(s, vectors) for s in sentences]
        sentences = [s for s in sentences if s]
        n = sum(len(s) for s in sentences)
        points, weights = [], []
        if word_mass:
            for word, count in Counter(w for s in sentences for w in s).items():
                points.append(vectors[word])
                weights.append(word_mass * count / n)
        if word_mass < 1:
            for s in sentences:
                points.append(np.mean([vectors[w] for w in s], axis=0))
                weights.append((1 - word_mass) * len(s) / n)
        return np.array(points, dtype=np.float64), np.array(weights)

    (x, a), (y, b) = bag(hyp_sentences), bag(ref_sentences)
    if len(a) == 0 or len(b) == 0:  # an empty hypothesis scores 0; an empty reference does not apply
        return 0.0 if len(a) == 0 else math.nan
    return math.exp(-ot.emd2(a, b, ot.dist(x, y, metric="euclidean")))


def random_document(rng):
    return [[rng.choice(CONTENT + NOISE) for _ in range(rng.randint(0, 9))] + ["."]
            for _ in range(rng.choice([0, 1, 1, 2, 3, 4]))]


def score(reward_cls, embeddings, hyps, refs, vocab=None, **kwargs):
    vocab = vocab or Vocabulary(CONTENT[::2] + [".", "the"])  # the rest become OOV (extended) ids
    return reward_cls(embeddings)(RewardInput.from_texts(hyps, refs, vocab, **kwargs))


@pytest.mark.parametrize("reward_cls", MOVERS)
def test_matches_per_pair_pot_on_random_documents(reward_cls):
    rng = random.Random(1)
    docs = [(random_document(rng), random_document(rng)) for _ in range(150)]
    hyps = [[t for s in h for t in s] for h, _ in docs]
    ours = score(reward_cls, word_table(TABLE), hyps, [r for _, r in docs])
    expected = [reference_similarity(split_sentences(h), r, TABLE, reward_cls.name) for h, (_, r) in zip(hyps, docs)]
    np.testing.assert_allclose(ours.double().numpy(), expected, rtol=0, atol=1e-6)  # NaN where expected NaN
    assert 0.05 < np.nanmean(expected) < 0.95  # neither all-degenerate nor trivial


@pytest.mark.parametrize("threads", [2, 3])
def test_one_thread_and_several_threads_agree(threads):
    # Threads share the batch and take over what is left of each other's shares.
    rng = random.Random(5)
    docs = [(random_document(rng), random_document(rng)) for _ in range(50)]
    hyps, refs = [[t for s in h for t in s] for h, _ in docs], [r for _, r in docs]
    embeddings, default = word_table(TABLE), torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = score(SentenceWordMoverSimilarity, embeddings, hyps, refs)
        torch.set_num_threads(threads)
        several = score(SentenceWordMoverSimilarity, embeddings, hyps, refs)
    finally:
        torch.set_num_threads(default)
    torch.testing.assert_close(one, several, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("reward_cls", MOVERS)
def test_identity_and_symmetry(reward_cls):
    rng = random.Random(2)
    docs = [d for d in (random_document(rng) for _ in range(80)) if any(content_words(s, TABLE) for s in d)][:40]
    flat = [[t for s in d for t in s] for d in docs]
    embeddings = word_table(TABLE)
    assert score(reward_cls, embeddings, flat, docs).tolist() == pytest.approx([1.0] * 40, abs=1e-6)
    forward = score(reward_cls, embeddings, flat[:20], docs[20:])
    backward = score(reward_cls, embeddings, flat[20:], docs[:20])
    torch.testing.assert_close(forward, backward, rtol=0, atol=1e-6)


@pytest.mark.parametrize("reward_cls, distance", [
    (WordMoverSimilarity, 0.0),  # the same three words: only the sentences differ
    # sentences {cat dog} (0,2) 2/3, {fish} (3,4) 1/3 -> {cat} (0,0) 1/3, {dog fish} (1.5,4) 2/3:
    # (3,4)->(1.5,4) 1/3 * 1.5 + (0,2)->(0,0) 1/3 * 2 + (0,2)->(1.5,4) 1/3 * 2.5
    (SentenceMoverSimilarity, 2.0),
    # both halves; shared locations keep their common mass, then (3,4) 1/6 -> (1.5,4),
    # (0,2) 1/6 -> (0,0) and 1/6 -> (1.5,4): (1.5 + 2 + 2.5) / 6
    (SentenceWordMoverSimilarity, 1.0),
])
def test_hand_computed_two_sentence_case(reward_cls, distance):
    out = score(reward_cls, word_table(PLANE), [["cat", "dog", ".", "fish", "."]],
                [[["cat", "."], ["dog", "fish", "."]]])
    assert out.item() == pytest.approx(math.exp(-distance), abs=1e-6)


def test_hand_computed_two_word_case():
    out = score(WordMoverSimilarity, word_table(PLANE), [["cat", "dog"]], [[["cat", "fish"]]])
    assert out.item() == pytest.approx(math.exp(-1.5), abs=1e-6)  # not cat->fish + dog->cat (4.5)


@pytest.mark.parametrize("reward_cls", MOVERS)
def test_degenerate_inputs_have_defined_values(reward_cls):
    hyps = [[], ["the", "."], ["the", "."], ["cat", "."], ["cat"], ["dog", "cat"], []]
    refs = [[["dog", "."]], [["of", "a", "."]], [["cat", "."]], [["of", "."]], None, [["fish"]], None]
    out = score(reward_cls, word_table(PLANE), hyps, refs)
    # "dog cat" -> "fish": words (3 + 5) / 2; sentences (0, 2) -> (3, 4)
    one_sentence = {"wms": math.exp(-(3 + 5) / 2), "sms": math.exp(-math.dist([0, 2], [3, 4]))}
    one_sentence["s_wms"] = math.exp(-(0.5 * (3 + 5) / 2 + 0.5 * math.dist([0, 2], [3, 4])))
    # a hypothesis with no word left: 0, whatever the reference; else a reference with no word left
    # (or none): NaN, the example does not apply
    expected = [0.0, 0.0, 0.0, math.nan, math.nan, one_sentence[reward_cls.name], 0.0]
    assert out.tolist() == pytest.approx(expected, abs=1e-6, nan_ok=True)


def test_a_solve_that_did_not_converge_is_an_error_naming_its_rows(monkeypatch):
    monkeypatch.setattr("rewards.mover.batch_similarities", lambda *args: np.array([0.5, np.nan, 0.2]))
    with pytest.raises(RuntimeError, match=r"wms: the transport simplex did not converge for batch rows \[1\]"):
        score(WordMoverSimilarity, word_table(PLANE), [["cat"]] * 3, [[["dog"]]] * 3)


@pytest.mark.parametrize("reward_cls", MOVERS)
def test_batch_without_any_content_word_in_its_hypotheses(reward_cls):
    # An untrained model's samples: no hypothesis of the batch keeps a word after preprocessing.
    out = score(reward_cls, word_table(PLANE), [[], ["the", "."]], [[["cat", "."]], [["of", "."]]])
    assert out.tolist() == [0.0, 0.0]


def test_copied_and_reference_only_oov_words_get_their_own_vectors():
    vocab = Vocabulary(["cat", "."])  # fish and dog are outside the vocabulary
    embeddings = word_table(PLANE)
    inputs = RewardInput.from_texts([["fish", "."], ["fish"]], [[["dog", "."]], [["fish"]]], vocab,
                                    sources=[["fish", "swims"], []])
    assert inputs.hyp[0, 0].item() == len(vocab)  # copied article OOV: first extended id
    out = WordMoverSimilarity(embeddings)(inputs)
    assert out.tolist() == pytest.approx([math.exp(-3.0), 1.0], abs=1e-6)


def test_oov_vectors_follow_the_batch():
    vocab, embeddings = Vocabulary(["cat", "."]), word_table({**PLANE, "bird": [3.0, 0.0]})
    reward = WordMoverSimilarity(embeddings)
    # OOV lists [dog, fish] then [dog, bird]: same shape, so a stale per-batch table would show
    first = reward(RewardInput.from_texts([["fish"]], [[["dog"]]], vocab))
    second = reward(RewardInput.from_texts([["bird"]], [[["dog"]]], vocab))
    assert [first.item(), second.item()] == pytest.approx([math.exp(-3.0), math.exp(-5.0)], abs=1e-6)


def test_weighted_sum_zeroes_reference_terms_that_do_not_apply():
    embeddings = word_table(PLANE)
    inputs = RewardInput.from_texts([["cat", "dog"], ["cat", "dog"], ["the", "cat"]],
                                    [[["cat", "fish"]], None, [["the", "."]]], Vocabulary(PLANE))
    reward = WeightedSum({"rouge_l": RougeL(), "sms": SentenceMoverSimilarity(embeddings)},
                         {"rouge_l": 1.0, "sms": 2.0})
    out = reward(inputs)
    # ROUGE-L: LCS 1 of 2 and 2 -> F = 0.5; SMS: means (0, 2) and (1.5, 2); no reference: 0;
    # a reference without a content word: SMS NaN, so ROUGE-L alone (LCS "the", 1 of 2 and 2)
    assert out.tolist() == pytest.approx([0.5 + 2 * math.exp(-1.5), 0.0, 0.5], abs=1e-6)


def test_evaluation_means_leave_out_examples_a_metric_does_not_apply_to(caplog):
    hyps, refs = [[["cat", "."]], [["cat", "."]]], [[["cat", "."]], [["the", "."]]]
    means, per_example = evaluate(hyps, refs, {"wms": WordMoverSimilarity(word_table(PLANE))})
    assert [row["wms"] for row in per_example] == [pytest.approx(1000.0), None]
    assert means["wms"] == pytest.approx(1000.0)
    assert "wms does not apply to 1 of 2 examples" in caplog.text


@pytest.mark.parametrize("header", ["", "3 2\n"])
def test_vectors_from_a_text_file_are_loaded_once(tmp_path, header):
    path = tmp_path / "vectors.txt"
    path.write_text(header + "".join(f"{w} {x} {y}\n" for w, (x, y) in PLANE.items()))
    embeddings = GloveEmbeddings(str(path))
    assert GloveEmbeddings(path).word_vectors is embeddings.word_vectors
    out = score(WordMoverSimilarity, embeddings, [["cat", "dog"]], [[["cat", "fish"]]])
    assert out.item() == pytest.approx(math.exp(-1.5), abs=1e-6)


def test_stopwords_are_nltk_english():
    assert len(STOPWORDS) == 179
    assert {"mightn", "ma", "should've", "ourselves"} <= STOPWORDS
    assert not {"fire", "system", "computer", "thereby"} & STOPWORDS  # sklearn-only entries


SNOW_REFERENCE = ("the only thing crazier than a guy in snowbound massachusetts boxing up the powdery white stuff "
                  "and offering it for sale online ? people are actually buying it . for $ 89 , self-styled "
                  "entrepreneur kyle waring will ship you 6 pounds of boston-area snow in an insulated styrofoam "
                  "box -- enough for 10 to 15 snowballs , he says .")
SNOW_HUMAN = ("a man in suburban boston is selling snow online to customers in warmer states . for $ 89 , he "
              "will ship 6 pounds of snow in an insulated styrofoam box .")
SNOW_WORD_ORDER = ("in suburban boston , a man is selling snow online to customers in warmer states . he will "
                   "ship 6 pounds of snow in an insulated styrofoam box for $ 89 .")
SNOW_REPETITION = ("a man in suburban boston is selling snow is selling snow online to customers in warmer states "
                   "in warmer states . for $ 89 , he will ship he will ship 6 pounds 6 pounds of snow in an "
                   "insulated styrofoam box in a styrofoam box .")


@pytest.mark.parametrize("reward_cls", MOVERS)
def test_table1_order_invariance_and_repetition_penalty_with_glove(reward_cls):
    summaries = [s.split() for s in (SNOW_HUMAN, SNOW_WORD_ORDER, SNOW_REPETITION)]
    reference = [s.split() for s in SNOW_REFERENCE.replace(" ? ", " ?\n").replace(" . ", " .\n").split("\n")]
    tokens = [t for s in summaries for t in s] + [t for s in reference for t in s]
    out = score(reward_cls, GloveEmbeddings(), summaries, [reference] * 3,
                vocab=Vocabulary.build([tokens], 10_000))
    human, word_order, repetition = out.tolist()
    assert 0 < human < 1
    assert word_order == pytest.approx(human, abs=1e-6)
    assert repetition < human - 1e-4


def test_hydra_configs_instantiate_their_classes():
    expected = {"rouge_l": RougeL, "wms": WordMoverSimilarity, "sms": SentenceMoverSimilarity,
                "s_wms": SentenceWordMoverSimilarity, "rouge_l_sms": WeightedSum}
    for name, cls in expected.items():
        reward = instantiate(OmegaConf.load(CONF / f"{name}.yaml"))
        assert isinstance(reward, cls)
    inputs = RewardInput.from_texts([["snow", "in", "boston", "."]], [[["boston", "snow", "."]]],
                                    Vocabulary(["snow", "boston", "in", "."]))
    rouge_l = 2 * (2 / 4) * (2 / 3) / (2 / 4 + 2 / 3)  # LCS "snow ." (or "boston .")
    assert reward(inputs).item() == pytest.approx(0.5 * rouge_l + 0.5 * 1.0, abs=1e-6)  # same words: SMS 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("reward_cls", MOVERS)
def test_reward_on_cuda_stays_on_cuda(reward_cls):
    hyps, refs = [["cat", "dog", ".", "fish", "."]], [[["cat", "."], ["dog", "fish", "."]]]
    embeddings = word_table(PLANE)
    on_gpu = score(reward_cls, embeddings, hyps, refs, device="cuda")
    assert on_gpu.device.type == "cuda"
    torch.testing.assert_close(on_gpu.cpu(), score(reward_cls, embeddings, hyps, refs), rtol=0, atol=1e-6)
