"""LS-Score (Wu et al. 2020): the scorer's L and S against hand computations, pads, pooling, the ranking loss,
the negatives, and the frozen reward (article cache, checkpoint round trip). A tiny random BERT stands in for
MiniLM (the encoder is injected)."""
from __future__ import annotations

import importlib
import json
import random
from unittest.mock import patch

import pytest
import torch
import torch.nn.functional as F

from models.text.batch import Example
from models.text.vocab import Vocabulary
from rewards.base import RewardInput
from rewards.correlation import correlation
from rewards.ls_score import (LSScore, Negatives, aligned, dev_correlations, lexicon, load_scorer, ranking_loss,
                              read_dev, tokenize_batch)


@pytest.fixture()
def scorer_and_tokenizer(tiny_qa_model):
    tokenizer, scorer = load_scorer(None, encoder=tiny_qa_model, alpha=0.5, beta=2.0)
    return scorer.eval(), tokenizer


def test_l_is_the_mean_log_probability_of_real_tokens_and_pads_never_count(scorer_and_tokenizer):
    scorer, tokenizer = scorer_and_tokenizer
    texts = ["the cat sat", "police said the president of france visited berlin on monday"]
    ids, mask, counted = tokenize_batch(tokenizer, texts, 64)
    vectors = torch.randn(2, 1, scorer.encoder.config.hidden_size)  # pooled articles, as LSScorer.article gives them
    article = vectors, torch.ones(2, 1, dtype=torch.bool)
    with torch.no_grad():
        batch = scorer(ids, mask, counted, article)
        alone_ids, alone_mask, alone_counted = tokenize_batch(tokenizer, texts[:1], 64)  # no padding at all
        alone = scorer(alone_ids, alone_mask, alone_counted, (vectors[:1], article[1][:1]))
        # by hand: Eq. 5-6 over the tokens between [CLS] and [SEP]
        H = scorer.encoder(input_ids=alone_ids, attention_mask=alone_mask).last_hidden_state[0]
        W = scorer.encoder.get_input_embeddings().weight
        logp = (scorer.norm(F.gelu(scorer.transform(H))) @ W.T + scorer.decoder_bias).log_softmax(-1)
        tokens = alone_ids[0].tolist()
        expected = sum(logp[i, tokens[i]] for i in range(1, len(tokens) - 1)) / (len(tokens) - 2)
    assert mask[0].sum() < mask.shape[1]  # the short text was padded
    assert float(alone["L"][0]) == pytest.approx(float(expected), rel=1e-5)
    assert float(batch["L"][0]) == pytest.approx(float(alone["L"][0]), rel=1e-5)


def test_s_is_the_cosine_of_pooled_encodings_and_ls_their_weighted_sum(scorer_and_tokenizer):
    scorer, tokenizer = scorer_and_tokenizer
    ids, mask, counted = tokenize_batch(tokenizer, ["the cat sat on the mat", "a dog"], 64)
    vectors = torch.randn(2, 1, scorer.encoder.config.hidden_size)
    article = vectors, torch.ones(2, 1, dtype=torch.bool)
    with torch.no_grad():
        out = scorer(ids, mask, counted, article)
        H = scorer.encoder(input_ids=ids[1:, :4], attention_mask=mask[1:, :4]).last_hidden_state[0]  # "a dog": 4
        mean = H.mean(0)  # the mean over its real tokens only ([CLS] a dog [SEP])
        expected = torch.dot(mean, vectors[1, 0]) / (mean.norm() * vectors[1, 0].norm())
        scorer.config.pooling = "cls"
        cls = scorer(ids, mask, counted, article)["S"][1]
    assert int(mask[1].sum()) == 4
    assert float(out["S"][1]) == pytest.approx(float(expected), abs=1e-5)
    assert float(cls) == pytest.approx(float(F.cosine_similarity(H[0], vectors[1, 0], dim=0)), abs=1e-5)
    assert torch.allclose(out["LS"], 0.5 * out["L"] + 2.0 * out["S"])


def test_aligned_similarity_is_greedy_token_matching_by_hand():
    # summary tokens a = (1, 0), b = (0, 1); article tokens c = (1, 1), d = (1, 0), and a pad that must not match
    summary = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]])
    article = torch.tensor([[[1.0, 1.0], [3.0, 0.0], [0.0, 5.0]]])
    out = aligned(summary, torch.tensor([[True, True]]), article, torch.tensor([[True, True, False]]))
    c = 2 ** -0.5  # cos(a, c) = cos(b, c)
    P = (1.0 + c) / 2  # a's best is d (1), b's is c (the pad, cosine 1 with b, is not an article token)
    R = (c + 1.0) / 2  # c's best: a or b (c), d's: a (1)
    assert float(out["precision"]) == pytest.approx(P) and float(out["recall"]) == pytest.approx(R)
    assert float(out["f1"]) == pytest.approx(2 * P * R / (P + R))
    # a summary without tokens scores 0 on all three, and so does one against an article without tokens
    none = aligned(summary, torch.tensor([[False, False]]), article, torch.tensor([[True, True, True]]))
    assert all(float(v) == 0 for v in none.values())
    none = aligned(summary, torch.tensor([[True, True]]), article, torch.tensor([[False, False, False]]))
    assert all(float(v) == 0 for v in none.values())


def test_aligned_reward_matches_the_scorer_unbatched_and_its_cache_keeps_the_most_recent(tiny_qa_model):
    reward = LSScore(None, encoder=tiny_qa_model, alpha=0.0, similarity="f1", cached_articles=2)
    articles = ["the president of france visited berlin on monday .", "police said a man ran .", ""]
    summaries = ["the president visited berlin", "a man ran", "police"]
    scores = reward(reward_input(summaries, articles))
    scorer, tokenizer = reward.scorer, reward.tokenizer
    with torch.no_grad():
        for summary, text, score in zip(summaries, articles, scores):
            ids, mask, counted = tokenize_batch(tokenizer, [text], 256)
            summary_ids, summary_mask, summary_counted = tokenize_batch(tokenizer, [summary], 128)
            expected = aligned(scorer.encode(summary_ids, summary_mask)[0], summary_counted,
                               scorer.encode(ids, mask)[0], counted)["f1"]
            assert float(score) == pytest.approx(float(expected), abs=1e-5)
    assert float(scores[2]) == 0  # the empty article has no token to align with
    assert len(reward._articles) == 2 and ("0", hash(articles[0])) not in reward._articles  # the oldest went out
    with pytest.raises(ValueError, match="cached_articles"):
        LSScore(None, encoder=tiny_qa_model, cached_articles=-1)


def test_ranking_loss_hand_computed():
    def scores(L: float, S: float, LS: float) -> dict:
        return {"L": torch.tensor([L]), "S": torch.tensor([S]), "LS": torch.tensor([LS])}
    positive = scores(L=-1.0, S=0.9, LS=1.0)
    negatives = {"deleted": scores(L=-1.5, S=0.8, LS=0.5), "shuffled": scores(L=-3.0, S=0.7, LS=0.2),
                 "inserted": scores(L=-0.5, S=0.95, LS=1.5)}
    # single (Eq. 8): (1 − 0.5) + (1 − 0.8) + (1 + 0.5) = 2.2
    assert float(ranking_loss(positive, negatives, "single")) == pytest.approx(2.2)
    # two: L over deleted, shuffled: (1 − 0.5) + max(0, 1 − 2) = 0.5; S over deleted, inserted: 0.9 + 1.05
    assert float(ranking_loss(positive, negatives, "two")) == pytest.approx(0.5 + 0.9 + 1.05)
    with pytest.raises(ValueError, match="loss form"):
        ranking_loss(positive, negatives, "triple")
    # any subset of the kinds ranks; none of a form's kinds is refused
    assert float(ranking_loss(positive, {"shuffled": negatives["shuffled"]}, "single")) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="ranks none of the negatives"):
        ranking_loss(positive, {}, "single")
    # the fourth negative: in the single hinge on LS (1 − (1 − 0.3)) and the L hinge of the two (1 − (−1 + 1.5))
    negatives["repeated"] = scores(L=-1.5, S=0.9, LS=0.3)
    assert float(ranking_loss(positive, negatives, "single")) == pytest.approx(2.2 + 0.3)
    assert float(ranking_loss(positive, negatives, "two")) == pytest.approx(0.5 + 0.9 + 1.05 + 0.5)


def test_negatives():
    reference = [["the", "cat", "sat", "."], ["it", "was", "happy", "."]]
    article = [["the", "cat", "sat", "on", "the", "mat", "."], ["dogs", "bark", "."], ["it", "was", "happy", "."]]
    rng = random.Random(0)
    assert Negatives(delete_rate=0.0)(reference, article, rng)["deleted"] == "the cat sat . it was happy ."
    assert Negatives(delete_rate=1.0)(reference, article, rng)["deleted"] == "the"  # never empty
    built = Negatives(delete_rate=0.5)(reference, article, rng)
    shuffled = built["shuffled"].split()
    assert sorted(shuffled[:4]) == sorted(reference[0]) and sorted(shuffled[4:]) == sorted(reference[1])
    # the two article sentences closest to the reference's are never inserted: only "dogs bark ." is left
    inserted = built["inserted"]
    assert "dogs bark ." in inserted and len(inserted.split()) == 8 + 3
    assert "repeated" not in built and Negatives().kinds == ("deleted", "shuffled", "inserted")
    # the fourth negative: the reference, then two of its own sentences again; the other three drawn as without it
    four = Negatives(delete_rate=0.5, repeat_sentences=2, kinds=("deleted", "shuffled", "inserted", "repeated"))
    with_four = four(reference, article, random.Random(1))
    without = Negatives(0.5)(reference, article, random.Random(1))
    assert four.kinds[-1] == "repeated" and {k: with_four[k] for k in without} == without
    words = with_four["repeated"].split()
    assert words[:8] == reference[0] + reference[1] and len(words) == 16
    assert words[8:12] in reference and words[12:] in reference
    with pytest.raises(ValueError, match="negative kinds must be among"):
        Negatives(kinds=("deleted", "paraphrased"))


def test_content_negatives_swap_the_articles_words_numbers_first_and_drop_the_best_supported_sentence():
    reference = [["police", "held", "3", "men", "."], ["the", "van", "was", "robbed", "."]]
    article = [["a", "van", "was", "robbed", "by", "3", "men", "."], ["police", "said", "47", "guards", "ran", "."]]
    swapped = Negatives(swap_words=1, kinds=("swapped",))(reference, article, random.Random(0))["swapped"].split()
    # the one number the article shares (3) becomes the article's other number (47); nothing else moves
    assert swapped == ["police", "held", "47", "men", ".", "the", "van", "was", "robbed", "."]
    two = Negatives(swap_words=2, kinds=("swapped",))(reference, article, random.Random(0))["swapped"].split()
    changed = [(a, b) for a, b in zip(reference[0] + reference[1], two) if a != b]
    # then a word the article has (police, men, van, robbed: not "held", absent; not "the", a stopword) becomes an
    # article word the reference lacks (said, guards, ran)
    assert changed[0] == ("3", "47") and len(changed) == 2
    assert changed[1][0] in {"police", "men", "van", "robbed"} and changed[1][1] in {"said", "guards", "ran"}
    # the dropped negative loses the sentence sharing most content words with the article (police, 3, men against
    # van, robbed; stopwords and punctuation, which would tie them, do not count)
    dropped = Negatives(kinds=("dropped",))(reference, article, random.Random(0))["dropped"]
    assert dropped == "the van was robbed ."
    assert Negatives(kinds=("dropped",))(reference[:1], article, random.Random(0))["dropped"] == "police held"
    # foreign: a word the article has (not "held", not a number) becomes a lexicon word the article lacks
    foreign = Negatives(swap_words=1, kinds=("foreign",), lexicon=("men", "police", "robbed", "tiger", "van"))
    for seed in range(5):
        words = foreign(reference, article, random.Random(seed))["foreign"].split()
        changed = [(a, b) for a, b in zip(reference[0] + reference[1], words) if a != b]
        assert len(changed) == 1 and changed[0][0] in {"police", "men", "van", "robbed"} and changed[0][1] == "tiger"
    assert lexicon([reference, [["The", "3", "tigers", "."]]]) == ("The", "held", "men", "police", "robbed", "tigers",
                                                                    "van")
    with pytest.raises(ValueError, match="needs a lexicon"):
        Negatives(kinds=("foreign",))


def reward_input(summaries: list[str], articles: list[str]) -> RewardInput:
    hyps = [s.split() for s in summaries]
    words = sorted({w for t in summaries + articles for w in t.split()})
    return RewardInput.from_texts(hyps, [None] * len(hyps), Vocabulary(words), source_texts=articles)


def test_reward_is_frozen_caches_articles_and_round_trips_a_checkpoint(tiny_qa_model, tmp_path, monkeypatch):
    reward = LSScore(None, encoder=tiny_qa_model)
    assert not reward.needs_reference
    assert not any(p.requires_grad for p in reward.scorer.parameters())
    encoded = []
    encode = reward.scorer.encode
    monkeypatch.setattr(reward.scorer, "encode", lambda ids, mask: encoded.append(len(ids)) or encode(ids, mask))
    articles = ["the president of france visited berlin .", "police said a man ran ."]
    first = reward(reward_input(["the president visited berlin", "a man ran"], articles))
    second = reward(reward_input(["france", "police said"], articles))
    # articles encoded once (one batch of 2) across both calls; summaries once per call
    assert encoded == [2, 2, 2]
    assert not first.requires_grad and first.shape == (2,)
    reward.scorer.save(tmp_path)
    again = LSScore(str(tmp_path))
    assert torch.allclose(again(reward_input(["france", "police said"], articles)), second, atol=1e-5)


def test_training_articles_never_include_held_out_ids():
    module = importlib.import_module("scripts.train_ls_score")
    examples = [Example(id=i, source=["a", "."], reference=[["a"]]) for i in ("x", "y", "z")]
    examples.append(Example(id="w", source=["a"], reference=None))  # unlabelled: no positive to rank
    assert [e.id for e in module.usable(examples, {"y"})] == ["x", "z"]


PAPER_RECIPE = ["--negatives", "deleted", "shuffled", "inserted", "repeated", "--similarity", "cosine", "--alpha",
                "0.01", "--margin", "1", "--distill", "0", "--l2sp", "0", "--select-by", "accuracy"]


def test_the_scripts_defaults_are_the_content_recipe_and_its_dev_sets_are_named_where_missing(tmp_path, monkeypatch,
                                                                                              capsys):
    # the defaults trained the cosine recipe, which scores below its untrained encoder on held-out content judgments
    module = importlib.import_module("scripts.train_ls_score")
    for spec in module.DEV_SETS:
        (tmp_path / spec.rpartition(":")[0]).parent.mkdir(exist_ok=True)
        (tmp_path / spec.rpartition(":")[0]).write_text("")
    monkeypatch.setenv("SUMRL_DATA_DIR", str(tmp_path))
    args = module.parse_args([])
    assert (args.similarity, args.alpha, args.margin, args.negatives, args.distill, args.l2sp, args.select_by,
            args.max_article_tokens, args.max_summary_tokens, args.eval_every, args.dev_rows) == (
        "f1", 0.0, 0.1, ["deleted", "swapped", "dropped", "foreign"], 2.0, 0.1, "dev", 256, 128, 50, 300)
    assert args.dev == [f"{tmp_path}/human/realsumm_cnndm.jsonl:litepyramid_recall",
                        f"{tmp_path}/human/qags_xsum.jsonl:fact", f"{tmp_path}/human/chaganty2018_cnndm.jsonl:overall"]
    monkeypatch.setenv("SUMRL_DATA_DIR", str(tmp_path / "elsewhere"))
    with pytest.raises(SystemExit):
        module.parse_args([])
    assert "--select-by dev (the default) reads the human-judgment sets" in capsys.readouterr().err
    assert module.parse_args(["--select-by", "accuracy"]).dev == []


def test_training_script_end_to_end_with_the_fourth_negative(tiny_qa_model, tmp_path):
    module = importlib.import_module("scripts.train_ls_score")
    held_out = tmp_path / "held_out.tsv"
    held_out.write_text("id\n")
    output = tmp_path / "ls"
    module.main(["--data", "data=demo", "data.train.n=120", f"cache_dir={tmp_path}", "--encoder", tiny_qa_model,
                 "--held-out", str(held_out), "--output", str(output), "--repeat-sentences", "1",
                 "--articles", "16", "--batch-size", "4", "--eval-every", "2", "--val-articles", "4",
                 "--train-layers", "1", *PAPER_RECIPE])
    card = json.loads((output / "training.json").read_text())
    assert card["steps"] == 4 and set(card["best"]) >= {"deleted", "shuffled", "inserted", "repeated"}
    assert "deleted, shuffled, inserted, repeated (" in (output / "README.md").read_text()
    assert (output / "curve.png").exists()
    LSScore(str(output))  # the checkpoint loads as a reward
    # the content negatives alone, held toward the untrained cosine
    module.main(["--data", "data=demo", "data.train.n=120", f"cache_dir={tmp_path}", "--encoder", tiny_qa_model,
                 "--held-out", str(held_out), "--output", str(output), "--negatives", "swapped", "dropped", "foreign",
                 "--distill", "1", "--similarity", "f1", "--articles", "8", "--batch-size", "4", "--eval-every", "2",
                 "--val-articles", "4", "--train-layers", "1", "--select-by", "accuracy"])
    card = json.loads((output / "training.json").read_text())
    assert card["steps"] == 2 and {"swapped", "dropped", "foreign"} <= set(card["best"])
    assert "deleted" not in card["best"]
    readme = (output / "README.md").read_text()
    assert "distilled toward the untrained S, weight 1.0" in readme and "f1 of the summary's greedy token" in readme
    assert LSScore(str(output)).scorer.config.similarity == "f1"


def test_drift_is_the_mean_squared_change_of_s_over_every_summary():
    module = importlib.import_module("scripts.train_ls_score")
    S = lambda *values: {"S": torch.tensor(values)}  # noqa: E731
    now = (S(0.5, 0.4), {"swapped": S(0.2, 0.1)})
    then = (S(0.3, 0.4), {"swapped": S(0.2, 0.4), "unused": S(9.0, 9.0)})
    assert float(module.drift(*now, then)) == pytest.approx((0.2 ** 2 + 0.3 ** 2) / 4)


# ---------------------------------------------------------------- training levers: dev sets, L2-SP
def judgments(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


DEV = [{"system": s, "source": f"police said {a} visited berlin on monday .", "candidate": f"{w} visited berlin .",
        "overall": score}  # two articles, each with two judged summaries
       for s, a, w, score in (("a", "merkel", "merkel", 0.9), ("b", "merkel", "the president", 0.5),
                              ("c", "france", "france", None), ("reference", "nobody", "nobody", 1.0),
                              ("d", "a cat", "a cat", 0.1), ("e", "a cat", "police", 0.3))]


def test_a_dev_set_keeps_judged_system_rows_and_its_correlation_is_spearmans(scorer_and_tokenizer, tmp_path,
                                                                             tiny_qa_model):
    from scipy.stats import spearmanr
    import rewards.ls_score as module  # where dev sets are scored
    scorer, tokenizer = scorer_and_tokenizer
    dev = read_dev(f"{judgments(tmp_path / 'dev.jsonl', DEV)}:overall", rows=10, seed=0)
    assert dev.name == "dev:overall" and dev.human == [0.9, 0.5, 0.1, 0.3]  # no null judgment, no reference row
    scored, encoded = [], []  # the scores behind the correlation; the articles each encoding pass read
    article = scorer.article
    with patch.object(module, "correlation", lambda scores, human: scored.extend(scores) or correlation(scores, human)), \
            patch.object(scorer, "article", lambda ids, *rest: encoded.append(len(ids)) or article(ids, *rest)):
        rhos = dev_correlations(scorer, tokenizer, [dev], batch_size=3)
    assert encoded == [2]  # each of the two articles once, for its two summaries
    with torch.no_grad():  # each summary against its article encoded alone, without dropout
        scorer.eval()
        alone = [float(scorer(*tokenize_batch(tokenizer, [summary], scorer.config.max_summary_tokens),
                              scorer.article(*tokenize_batch(tokenizer, [text], scorer.config.max_article_tokens)))["LS"])
                 for summary, text in zip(dev.summaries, dev.articles)]
        scorer.train()
    assert scored == pytest.approx(alone, abs=1e-5)
    reward = LSScore(None, encoder=tiny_qa_model, alpha=0.5, beta=2.0)
    reward.scorer.load_state_dict(scorer.state_dict())
    vocab = Vocabulary([w for s in dev.summaries for w in s.split()])
    values = reward(RewardInput.from_texts([s.split() for s in dev.summaries], [None] * 4, vocab,
                                           source_texts=dev.articles))
    assert rhos["dev/dev:overall"] == pytest.approx(spearmanr(values.tolist(), dev.human)[0], abs=1e-9)
    assert rhos["dev"] == rhos["dev/dev:overall"]
    with pytest.raises(module.DataError, match="PATH:FIELD"):
        read_dev(str(tmp_path / "dev.jsonl"), 10, 0)
    with pytest.raises(module.DataError, match="2 judged rows"):
        read_dev(f"{judgments(tmp_path / 'few.jsonl', DEV[:3])}:overall", 10, 0)


def test_l2sp_is_the_squared_distance_from_the_pretrained_weights():
    module = importlib.import_module("scripts.train_ls_score")
    weight = torch.nn.Parameter(torch.ones(3))
    anchors = {weight: weight.detach().clone()}
    assert float(module.l2sp_penalty(anchors)) == 0.0
    with torch.no_grad():
        weight.add_(torch.tensor([0.5, 0.0, -1.0]))
    assert float(module.l2sp_penalty(anchors)) == pytest.approx(0.25 + 1.0)


def test_training_can_keep_the_checkpoint_that_agrees_best_with_human_dev_judgments(tiny_qa_model, tmp_path,
                                                                                     monkeypatch):
    module = importlib.import_module("scripts.train_ls_score")
    held_out = tmp_path / "held_out.tsv"
    held_out.write_text("id\n")
    dev = judgments(tmp_path / "dev.jsonl", DEV)
    output = tmp_path / "ls"
    output.mkdir()
    (output / "ls_score.pt").write_bytes(b"the previous evaluator")
    plot = module.plot  # called once training has ended: the previous evaluator serves until then

    def previous_still_served(*args):
        assert (output / "ls_score.pt").read_bytes() == b"the previous evaluator"
        plot(*args)
    monkeypatch.setattr(module, "plot", previous_still_served)
    module.main(["--data", "data=demo", "data.train.n=120", f"cache_dir={tmp_path}", "--encoder", tiny_qa_model,
                 "--held-out", str(held_out), "--output", str(output), "--articles", "16", "--batch-size", "4",
                 "--eval-every", "2", "--val-articles", "4", "--train-layers", "1", "--l2sp", "0.1",
                 "--select-by", "dev", "--dev", f"{dev}:overall"])
    card = json.loads((output / "training.json").read_text())
    assert sorted(p.name for p in output.iterdir()) == ["README.md", "curve.png", "ls_score.pt", "training.json"]
    assert torch.load(output / "ls_score.pt", weights_only=True)["card"]["step"] == card["best"]["step"]  # replaced
    (output / "ls_score.pt").write_bytes((output / "ls_score.pt").read_bytes()[:1000])  # as a kill mid-save left it
    with pytest.raises(ValueError, match=r"ls_score.pt is not a whole LS-Score checkpoint .*train one again"):
        load_scorer(str(output))
    assert all("dev/dev:overall" in point for point in card["history"])
    assert card["best"]["dev"] == max(point["dev"] for point in card["history"])
    readme = (output / "README.md").read_text()
    assert "chosen by mean dev Spearman" in readme and "L2-SP 0.1 toward the pretrained weights" in readme
    with pytest.raises(SystemExit):
        module.main(["--select-by", "dev", "--dev"])
    with pytest.raises(SystemExit):  # a negative weight would reward the drift it is there to penalise
        module.parse_args(["--distill", "-1"])


def test_sources_pool_up_to_their_cap_each_without_held_out_ids(tmp_path, monkeypatch):
    module = importlib.import_module("scripts.train_ls_score")
    split = lambda name, n: [Example(id=f"{name}{i}", source=["a", "."], reference=[["a"]]) for i in range(n)]  # noqa: E731
    sources = {"A": {"train": split("a", 10), "val": split("av", 5)}, "B": {"train": split("b", 4), "val": split("bv", 1)}}
    monkeypatch.setattr(module, "load_splits", lambda overrides: (sources[overrides[0]], str(tmp_path)))
    held_out = tmp_path / "held_out.tsv"
    held_out.write_text("id\na1\nb1\nav0\n")
    train, val, excluded = module.articles([["A"], ["B"]], str(held_out), 3, 2, random.Random(0))
    ids = [e.id for e in train]
    assert excluded == {"a1", "b1", "av0"} and len(ids) == 6
    assert sum(i.startswith("a") for i in ids) == 3 and sorted(i for i in ids if i.startswith("b")) == ["b0", "b2", "b3"]
    assert [e.id for e in val] == ["av1", "av2", "bv0"]
    # one source: shuffled and capped as before pooling existed, so single-source recipes reproduce
    alone, _, _ = module.articles([["A"]], str(held_out), 3, 2, random.Random(0))
    expected = [e for e in sources["A"]["train"] if e.id != "a1"]
    random.Random(0).shuffle(expected)
    assert [e.id for e in alone] == [e.id for e in expected[:3]]


def test_the_reward_config_keeps_the_checkpoints_settings_unless_one_is_given(tiny_ls_score):
    """conf/reward/ls_score.yaml lists the evaluator's settings as null (the checkpoint's), so that an override needs
    no `+`: reward.similarity=f1 changes S alone."""
    from pathlib import Path

    from hydra.utils import instantiate
    from omegaconf import OmegaConf
    node = OmegaConf.merge(OmegaConf.load(Path(__file__).parents[1] / "conf" / "reward" / "ls_score.yaml"),
                           {"checkpoint": tiny_ls_score})
    saved = load_scorer(tiny_ls_score)[1].config
    assert instantiate(node).scorer.config == saved and saved.similarity == "cosine"
    changed = instantiate(OmegaConf.merge(node, {"similarity": "f1"})).scorer.config
    assert changed.similarity == "f1" and {**vars(changed), "similarity": "cosine"} == vars(saved)
