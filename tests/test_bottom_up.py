"""Bottom-up summarization (Gehrmann et al. 2018, issue 14)."""
import csv
import json
from functools import partial
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from conftest import write_selector_checkpoint
from models.bottom_up import (BottomUp, ContentSelector, ContentSelectorConfig, ContextualFeatures, OracleCopy,
                              copy_glove, selection_labels)
from models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from models.text.vectors import word_vectors
from test_decoding import toy_corpus, toy_vocab
from models.text.batch import Batch, Example, collate
from models.text.vocab import Vocabulary
from trainer.checkpoints import checkpoint_info, load_content_selector
from trainer.module import SummarizationModule
from trainer.selector_module import ContentSelectorModule
from trainer.run import run

ROOT = Path(__file__).resolve().parents[1]


# ==== the content selector: labels, model, training, its module and its Hydra run =====================================

def test_labels_match_whole_tokens_not_characters():
    # Gehrmann et al.'s character matching would find "art" inside "party"
    assert selection_labels("the art show .".split(), "a party show .".split()) == [0, 0, 1, 1]
    assert selection_labels([], ["a"]) == [] and selection_labels(["a", "b"], []) == [0, 0]


def test_labels_take_the_longest_span_and_label_each_span_once():
    source = "the white house said the white house".split()
    assert selection_labels(source, "the white house spoke".split()) == [1, 1, 1, 0, 0, 0, 0]
    # a repeated span is labelled at its first occurrence only, however often the reference has it
    assert selection_labels(source, "the white house and the white house".split()) == [1, 1, 1, 0, 0, 0, 0]
    # the longest match wins: "new york city" over "new york", then "york" alone is a new span
    assert selection_labels("new york city and york".split(), "in new york . new york city".split()) == [1, 1, 1, 0, 1]
    assert selection_labels("x a b c y".split(), "a b c".split()) == [0, 1, 1, 1, 0]
    # the first match would take "new york" and leave "city", a span already labelled, at 0
    reference = "city y new york z new york city".split()
    assert selection_labels("city x new york city".split(), reference) == [1, 0, 1, 1, 1]
    # spans may overlap in the reference: "a b" then "b c" (a new span), though "b" was already read
    assert selection_labels("a b b c".split(), "a b c".split()) == [1, 1, 1, 1]


def test_selector_shapes_and_padding():
    torch.manual_seed(0)
    vocab = toy_vocab()
    model = ContentSelector(ContentSelectorConfig(vocab_size=len(vocab), emb_dim=8, hidden_dim=6)).eval()
    examples = toy_corpus(3)
    batch = collate(examples, vocab)
    logits, probs = model(batch), model.probabilities(batch)
    assert logits.shape == probs.shape == batch.src.shape
    mask = batch.src_mask
    assert (probs[~mask] == 0).all() and ((probs[mask] > 0) & (probs[mask] < 1)).all()
    # padding changes nothing on the real tokens: the shortest article alone, unpadded, gives the same logits
    short = min(range(3), key=lambda i: len(examples[i].source))
    n = len(examples[short].source)
    assert n < batch.src.size(1)
    assert torch.allclose(logits[short, :n], model(collate([examples[short]], vocab))[0], atol=1e-6)


def contextual_batch(tiny_qa_model, sources: list[str]) -> tuple[ContextualFeatures, Batch]:
    words = [text.split() for text in sources]
    vocab = Vocabulary.build(words, 100)
    return (ContextualFeatures(tiny_qa_model, cpu_bf16=False),
            collate([Example(f"a{i}", w, [w[:2]]) for i, w in enumerate(words)], vocab))


def test_a_words_contextual_vector_is_the_mean_of_its_wordpieces(tiny_qa_model, monkeypatch):
    """Against the encoder read directly: "cat" is one wordpiece of the tiny vocabulary, "xqz" three; an article past
    `max_wordpieces` leaves its last words at zero."""
    features, batch = contextual_batch(tiny_qa_model, ["the cat xqz sat .", "police said xqz"])
    got = features(batch)  # [2, 5, 32]
    pieces = features.tokenizer(["the cat xqz sat ."], return_tensors="pt")
    tokens = features.tokenizer.convert_ids_to_tokens(pieces["input_ids"][0])
    assert tokens == ["[CLS]", "the", "cat", "x", "##q", "##z", "sat", ".", "[SEP]"]
    with torch.no_grad():
        hidden = features.encoder(**pieces).last_hidden_state[0]
    assert torch.allclose(got[0, 1], hidden[2], atol=1e-2)  # bf16 storage: 2-3 significant digits
    assert torch.allclose(got[0, 2], hidden[3:6].mean(0), atol=1e-2)
    assert (got[1, 3:] == 0).all() and (got[1, :3] != 0).any(-1).all()  # padding
    calls = []
    monkeypatch.setattr(features, "encode", lambda *a: calls.append(a) or [])
    assert torch.equal(features(batch), got) and not calls  # kept by article: the frozen encoder reads it once
    features.max_wordpieces, features.kept = 5, {}  # [CLS] the cat x ##q [SEP]: "xqz" is cut, "sat" and "." lost
    monkeypatch.undo()
    cut = features(batch)[0]
    assert (cut[3:] == 0).all() and (cut[:3] != 0).any(-1).all()


def test_a_contextual_selector_trains_its_head_only_and_checkpoints_without_the_encoder(tiny_qa_model):
    _, batch = contextual_batch(tiny_qa_model, ["the cat sat .", "police said"])
    selector = ContentSelector(ContentSelectorConfig(100, emb_dim=4, hidden_dim=4, contextual=tiny_qa_model))
    encoder = selector.contextual.encoder
    assert not set(map(id, encoder.parameters())) & set(map(id, selector.parameters()))
    assert not any(key.startswith("contextual") for key in selector.state_dict())
    assert selector.encoder.fw[0].input_size == 4 + 32  # the embedding and the encoder's word vector
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    selector.probabilities(batch).sum().backward()
    assert all(p.grad is None for p in encoder.parameters())
    assert all(torch.equal(before[k], v) for k, v in encoder.state_dict().items())


def test_glove_fills_the_rows_of_the_words_it_has():
    vocab = Vocabulary(["the", "party", "zqxjkw"])
    embedding = torch.nn.Embedding(len(vocab), 50)
    before = embedding.weight.detach().clone()
    assert copy_glove(embedding, vocab) == 2
    words, matrix = word_vectors()
    assert torch.equal(embedding.weight[vocab.id("party")], torch.from_numpy(matrix[words.index("party")]))
    unknown = [vocab.pad_id, vocab.unk_id, vocab.id("zqxjkw")]  # specials and words GloVe lacks keep theirs
    assert torch.equal(embedding.weight[unknown], before[unknown])
    with pytest.raises(ValueError, match="set model.config.emb_dim=50"):
        copy_glove(torch.nn.Embedding(len(vocab), 16), vocab)


def auc(scores: list[float], labels: list[int]) -> float:
    """The probability that a positive outscores a negative (ties count half): AUC by its definition."""
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def test_a_tiny_selector_learns_the_toy_corpus():
    """Toy articles: filler sentences plus one news sentence that is the summary; 40 steps of the module's own
    training step must rank held-out copied tokens well above the rest."""
    torch.manual_seed(0)
    vocab = toy_vocab()
    batches = [collate(toy_corpus(64)[i:i + 16], vocab) for i in range(0, 64, 16)]
    module = ContentSelectorModule(ContentSelector(ContentSelectorConfig(len(vocab), emb_dim=16, hidden_dim=16)),
                                   vocab, partial(torch.optim.Adam, lr=1e-2))
    optimizer = module.configure_optimizers()
    for step in range(40):
        loss = module.training_step(batches[step % len(batches)], step)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    held_out = collate(toy_corpus(32, seed=1), vocab)
    with torch.no_grad():
        probs = module.model.eval().probabilities(held_out)
    scores, labels = [], []
    for row, (source, reference) in enumerate(zip(held_out.sources, held_out.references)):
        scores += probs[row, :len(source)].tolist()
        labels += selection_labels(source, [t for sentence in reference for t in sentence])
    assert auc(scores, labels) > 0.9


def test_module_metrics_agree_with_a_hand_computed_case(tmp_path):
    """Fixed probabilities on two articles (one padded) and one without a reference; padding and the article
    without a reference hold confident selections that must not count."""
    vocab = Vocabulary("a b c d e x .".split())
    batch = collate([Example("1", "a b c d".split(), [["a", "b", "x"]]),  # labels 1 1 0 0
                     Example("2", "c d e".split(), [["e", "."]]),  # labels 0 0 1, then padding
                     Example("3", "a b c d".split(), None)], vocab)
    probs = torch.tensor([[0.9, 0.4, 0.6, 0.2], [0.3, 0.1, 0.7, 0.99], [0.99] * 4])

    class Fixed(torch.nn.Module):
        def forward(self, batch):
            return torch.logit(probs)

    module = ContentSelectorModule(Fixed(), vocab, partial(torch.optim.Adam), threshold=0.5, output_dir=str(tmp_path))
    module.on_test_epoch_start()
    module.test_step(batch, 0)
    module.on_test_epoch_end()
    results = json.loads((tmp_path / "results.json").read_text())
    # selected at 0.5: 0.9, 0.6 | 0.7; labelled: 0.9, 0.4 | 0.7 -> TP 2, FP 1, FN 1
    # AUC: positives 0.9, 0.4, 0.7 against negatives 0.6, 0.2, 0.3, 0.1 win 4 + 3 + 4 of 12 pairs
    expected = {"n": 2, "precision": 2 / 3, "recall": 2 / 3, "f1": 2 / 3, "auc": 11 / 12, "selected": 3 / 7,
                "labelled": 3 / 7}
    assert results == pytest.approx(expected)
    assert auc([0.9, 0.4, 0.6, 0.2, 0.3, 0.1, 0.7], [1, 1, 0, 0, 0, 0, 1]) == pytest.approx(11 / 12)


SELECTOR_RUN = ["data=demo", "data.train.n=300", "data.val_sample_size=16", "data.test_size=12",
                "data.eval_batch_size=16", "model=content_selector", "model.config.emb_dim=16",
                "model.config.hidden_dim=24", "module.glove=false", "trainer.max_steps=15", "trainer.max_epochs=-1",
                "trainer.val_check_interval=5", "trainer.log_every_n_steps=1", "threads=null"]


@pytest.fixture(scope="module")
def selector_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("selector")
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("train", overrides=[f"output_dir={tmp / 'run'}", f"cache_dir={tmp / 'cache'}", *SELECTOR_RUN])
    return tmp / "run", run(cfg)


def test_selector_run_validates_tests_and_checkpoints(selector_run):
    run_dir, results = selector_run
    assert set(results) == {"n", "precision", "recall", "f1", "auc", "selected", "labelled"} and results["n"] == 12
    assert json.loads((run_dir / "results.json").read_text()) == results
    rows = list(csv.DictReader((run_dir / "logs" / "version_0" / "metrics.csv").open()))
    validated = [r for r in rows if r["val/loss"]]
    assert len(validated) == 3
    for key in ("precision", "recall", "f1", "auc"):
        assert all(0 <= float(r[f"val/selection_{key}"]) <= 1 for r in validated)
    best = run_dir / "checkpoints" / "best.ckpt"
    vocab_size = len(checkpoint_info(best)["vocab"])
    model = load_content_selector(best)
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    assert model.config == ContentSelectorConfig(vocab_size=vocab_size, emb_dim=16, hidden_dim=24)


def test_table4_leaves_a_selector_run_out_as_what_it_is(selector_run, capsys):
    """A content selector's run records no Table 4 row, and table4 names it as a selector, not an unfinished run."""
    from omegaconf import OmegaConf
    from evaluation.runs import EvaluationRefused, Run, tested
    run_dir, _ = selector_run
    assert "table" not in OmegaConf.load(run_dir / "config.yaml")
    with pytest.raises(EvaluationRefused, match="none of the runs given has test results"):
        tested([Run.read(run_dir)])
    said = capsys.readouterr().err
    assert "a content selector (model=content_selector), not a summarizer" in said and "resume" not in said


def test_load_content_selector_refuses_other_checkpoints(tmp_path):
    vocab = Vocabulary("a b c".split())
    summarizer = PointerGenerator(PointerGeneratorConfig(vocab_size=len(vocab), emb_dim=4, hidden_dim=4))
    checkpoint = {"state_dict": {f"model.{k}": v for k, v in summarizer.state_dict().items()}}
    SummarizationModule(summarizer, vocab, partial(torch.optim.Adam)).on_save_checkpoint(checkpoint)
    torch.save(checkpoint, tmp_path / "mle.ckpt")
    with pytest.raises(ValueError, match=r"mle.ckpt is not a content selector \(its stage is 'mle'\)") as error:
        load_content_selector(tmp_path / "mle.ckpt")
    assert "\n" not in str(error.value)


# ==== the bottom-up generator: a pointer-generator whose copy attention the frozen selector masks ===================

def bottom_up(tmp_path, **settings) -> tuple[BottomUp, Batch]:
    vocab, examples = toy_vocab(), toy_corpus(6, seed=2)
    selector = write_selector_checkpoint(tmp_path / "selector.ckpt", vocab)
    torch.manual_seed(0)
    model = BottomUp(PointerGeneratorConfig(vocab_size=len(vocab), emb_dim=16, hidden_dim=24),
                     load_content_selector(selector), **settings)
    return model.eval(), collate(examples, vocab)


def test_bottom_up_weights_are_a_pointer_generators(tmp_path):
    model, _ = bottom_up(tmp_path)
    plain = PointerGenerator(model.config)
    assert model.state_dict().keys() == plain.state_dict().keys()  # the selector is in no checkpoint
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in plain.parameters())  # nor optimizer
    plain.load_state_dict(model.state_dict())
    assert [part.checkpoint_path for part in model.frozen_parts] == [str(tmp_path / "selector.ckpt")]
    assert not any(p.requires_grad for p in model.selector.parameters())


def test_bottom_up_masks_below_the_threshold(tmp_path):
    for renormalize in (False, True):
        model, batch = bottom_up(tmp_path, renormalize=renormalize)
        probs = model.selector.probabilities(batch)
        model.threshold = float(probs[batch.src_mask].median())  # the random selector keeps about half the tokens
        with torch.no_grad():
            enc = model.encode(batch)
        kept = probs >= model.threshold
        assert 0.3 < kept[batch.src_mask].float().mean() < 0.7
        assert torch.equal(enc.copy_mask, kept.float() * (1.0 if renormalize else 2.0))
        assert enc.renormalize_copy == renormalize
        plain = PointerGenerator.encode(model, batch)
        torch.testing.assert_close(enc.outputs, plain.outputs)  # the encoder itself is untouched


def test_bottom_up_masks_training_steps_only_when_asked(tmp_path):
    model, batch = bottom_up(tmp_path)
    assert model.train().encode(batch).copy_mask is None
    model, batch = bottom_up(tmp_path, mask_in_training=True)
    enc = model.train().encode(batch)
    loss = model.mle_loss(batch, enc=enc)["loss"]
    loss.backward()  # the mask, made under inference_mode, takes part in a step with gradients
    assert enc.copy_mask is not None and model.p_gen.weight.grad is not None


def test_bottom_up_rejects_a_threshold_outside_0_1(tmp_path):
    with pytest.raises(ValueError, match="model.threshold"):
        bottom_up(tmp_path, threshold=1.5)


BOTTOM_UP_RUN = ["data=demo", "data.train.n=300", "data.val_sample_size=8", "data.test_size=8", "data.batch_size=8",
                 "data.eval_batch_size=8", "model=bottom_up", "model.config.emb_dim=16", "model.config.hidden_dim=24",
                 "model.mask_in_training=true", "reward=rouge_l", "init_from=none", "trainer.max_steps=2",
                 "trainer.max_epochs=-1", "trainer.val_check_interval=2", "threads=null", "+metrics={}",
                 "data.max_target_len=20", "run_name=bottom_up"]


def test_a_bottom_up_run_trains_with_the_mask_and_keeps_the_selector_out(selector_run, tmp_path):
    selector = selector_run[0] / "checkpoints" / "best.ckpt"
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("train", overrides=[f"output_dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}",
                                          f"model.selector.path={selector}", *BOTTOM_UP_RUN])
    results = run(cfg)
    assert results["n"] == 8 and 0 <= results["rougeL"] <= 100
    state = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    assert not any("selector" in key for key in state)
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        vocab = checkpoint_info(selector)["vocab"]
        other = write_selector_checkpoint(tmp_path / "other.ckpt", Vocabulary(vocab[5:] + ["zorblax"]))  # same size
        cfg = compose("train", overrides=[f"output_dir={tmp_path / 'run2'}", f"cache_dir={tmp_path / 'cache'}",
                                          f"model.selector.path={other}", *BOTTOM_UP_RUN])
    with pytest.raises(ValueError, match="other.ckpt was trained on another vocabulary"):
        run(cfg)
    assert not (tmp_path / "run2").exists()  # refused before anything was written


def test_the_oracle_mask_is_the_selection_labels():
    vocab = Vocabulary("the white house said new york".split())
    batch = collate([Example("a", "the white house said".split(), [["white", "house"]]),
                     Example("b", "new york".split(), [["york", "said"]])], vocab)
    torch.manual_seed(0)
    model = OracleCopy(PointerGeneratorConfig(vocab_size=len(vocab), emb_dim=8, hidden_dim=8)).eval()
    with torch.no_grad():
        assert model.encode(batch).copy_mask.tolist() == [[0, 2, 2, 0], [0, 2, 0, 0]]
