import random

import pytest
import torch
from rouge_score import rouge_scorer

from models.text.vocab import Vocabulary
from rewards.base import RewardInput
from rewards.rouge import RougeL, RougeScore, lcs_lengths
from rewards.scoring import score_tokenized


class WhitespaceTokenizer:
    def tokenize(self, text):
        return text.split()


def random_pairs(n, seed=0):
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(6)]  # small vocabulary: many matches

    def length():
        u = rng.random()
        return 0 if u < 0.05 else 1 if u < 0.15 else rng.randint(2, 40)

    return [([rng.choice(words) for _ in range(length())], [rng.choice(words) for _ in range(length())])
            for _ in range(n)]


def test_rouge_l_matches_rouge_score_on_random_pairs():
    pairs = random_pairs(1000)
    # the vocabulary lacks w5: those tokens become extended (OOV) ids, which must still match
    vocab = Vocabulary(f"w{i}" for i in range(5))
    inputs = RewardInput.from_texts([h for h, _ in pairs], [[r] for _, r in pairs], vocab)
    ours = RougeL()(inputs)
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False, tokenizer=WhitespaceTokenizer())
    expected = torch.tensor([scorer.score(" ".join(r), " ".join(h))["rougeL"].fmeasure for h, r in pairs],
                            dtype=torch.float64)
    assert ours.shape == (1000,) and ours.dtype == torch.float32
    assert (ours.double() - expected).abs().max().item() < 1e-6
    assert (expected > 0).sum() > 700 and (expected == 0).sum() > 50  # both regimes exercised


def dynamic_programming_lcs(a, b):
    row = [0] * (len(b) + 1)
    for x in a:
        diagonal = 0
        for j, y in enumerate(b):
            diagonal, row[j + 1] = row[j + 1], diagonal + 1 if x == y else max(row[j + 1], row[j])
    return row[-1]


@pytest.mark.parametrize("lengths", [
    [0, 1, 2, 5, 40],
    [62, 63, 64, 65],  # around one 64-bit word of the bit-parallel LCS
    [0, 1, 64, 65, 127, 128, 129, 200],  # several words, carries across them
])
def test_lcs_matches_dynamic_programming(lengths):
    rng = random.Random(len(lengths))
    pairs = [([rng.randrange(4) for _ in range(rng.choice(lengths))],
              [rng.randrange(4) for _ in range(rng.choice(lengths))]) for _ in range(300)]
    hyps, refs = [h for h, _ in pairs], [r for _, r in pairs]
    assert lcs_lengths(hyps, refs).tolist() == [dynamic_programming_lcs(h, r) for h, r in pairs]
    same_token = [[7] * len(h) for h in hyps], [[7] * len(r) for r in refs]  # every position matches: LCS = min
    assert lcs_lengths(*same_token).tolist() == [min(len(h), len(r)) for h, r in pairs]
    assert lcs_lengths([], []).tolist() == []


def test_rouge_l_beta_1_2_hand_case():
    vocab = Vocabulary("a b c d e".split())
    inputs = RewardInput.from_texts([["a", "b", "c", "d"]], [[["a", "c"], ["e"]]], vocab)
    # LCS("a b c d", "a c e") = 2, P = 2/4, R = 2/3: F = (1 + 1.44) P R / (R + 1.44 P) = 2.44 / 4.16
    assert RougeL(beta=1.2)(inputs).item() == pytest.approx(2.44 / 4.16, abs=1e-7)
    assert RougeL()(inputs).item() == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3), abs=1e-7)


def test_rouge_l_padding_and_eos_do_not_match():
    vocab = Vocabulary(["a"])
    inputs = RewardInput.from_texts([["a"], []], [[["a", "a"]], [["a"]]], vocab)
    # padding ids (0) on both sides must not count as matches
    assert RougeL()(inputs).tolist() == pytest.approx([2 * 1 * 0.5 / 1.5, 0.0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_rouge_l_stays_on_cuda():
    vocab = Vocabulary(["a", "b"])
    inputs = RewardInput.from_texts([["a", "b"]], [[["b", "a"]]], vocab, device="cuda")
    out = RougeL()(inputs)
    assert out.device.type == "cuda" and out.item() == pytest.approx(0.5)


def test_the_stem_cached_tokenizer_tokenizes_as_rouge_scores_stemming_tokenizer():
    from rouge_score.tokenizers import DefaultTokenizer
    from rewards.rouge import StemCachedTokenizer
    text = ("The runners were running quickly; generously, relational and conditional connections' ponies caresses "
            "12,000 U.S. agreed feed sensational ties dying lying hopefully")
    cached = StemCachedTokenizer()
    for _ in range(2):  # the second time from its cache
        assert cached.tokenize(text) == DefaultTokenizer(use_stemmer=True).tokenize(text)
    assert cached.stem.cache_info().hits > 0


def test_the_tests_rouge_is_rouge_score_on_the_sentences_for_all_four_keys():
    """The test's metric path (`score_tokenized`) gives rouge-score's own float64 F on the sentences, one per line for
    rougeLsum: a hypothesis's sentences each find their own LCS, stemming matches cats to cat."""
    hyps = [[["dogs", "ran", "."], ["the", "cats", "sat", "."]], [["a", "."], ["b", "."]], [["a", "b"]], []]
    refs = [[["the", "cat", "sat", "on", "the", "mat", "."], ["dogs", "run", "fast", "."]], [["b", "a", "."]],
            [["a", "c", "."]], [["x", "."]]]
    keys = ("rouge1", "rouge2", "rougeL", "rougeLsum")
    scores = score_tokenized({key: RougeScore(key) for key in keys}, hyps, refs)
    scorer = rouge_scorer.RougeScorer(list(keys), use_stemmer=True)
    for i, (hyp, ref) in enumerate(zip(hyps, refs)):
        expected = scorer.score("\n".join(" ".join(s) for s in ref), "\n".join(" ".join(s) for s in hyp))
        assert {key: scores[key][i] for key in keys} == {key: expected[key].fmeasure for key in keys}
    assert scores["rougeLsum"][1] > scores["rougeL"][1] and scores["rouge1"][0] > 0  # one LCS per sentence
    with pytest.raises(ValueError, match="rougeL"):
        RougeScore("rouge3")


def test_sumrl_score_gives_rouge_1_and_2_as_rouge_score_computes_them(tmp_path, capsys):
    """table4 prints ROUGE-1/2; `sumrl-score --rewards rouge_1 rouge_2` gives the same numbers (it had none)."""
    from rouge_score import rouge_scorer
    from test_scripts import load_script, write_jsonl
    rows = [{"summary": "the cats sat on a mat .", "reference": "a cat sat on the mat ."},
            {"summary": "dogs ran in the park .", "reference": "the dog ran to the parks ."}]
    means = load_script("score").main([str(write_jsonl(tmp_path / "s.jsonl", rows)), "--rewards", "rouge_1",
                                       "rouge_2"])
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2"], use_stemmer=True)
    for key, label in (("rouge1", "rouge_1"), ("rouge2", "rouge_2")):
        expected = sum(scorer.score(r["reference"], r["summary"])[key].fmeasure for r in rows) / 2
        assert means[label] == pytest.approx(expected, abs=1e-9)
    assert "| rouge_1 | ROUGE-1 |" in capsys.readouterr().out
