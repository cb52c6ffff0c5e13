"""sumrl-summarize: a checkpoint's beam summaries of a user's own file (JSONL, CSV or text), in its order, the text read
as the checkpoint's data read it; a bad line stops it, named, before any decoding."""
import csv
import json
import sys
from functools import partial

import pytest
import torch

from models.decoding import BlockRepeatedTrigrams, MinLength, beam_search
from models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from models.text.batch import Example, collate
from models.text.vocab import Vocabulary, tokenize_sentences
from test_scripts import load_script
from trainer.checkpoints import data_reading
from trainer.module import SummarizationModule

WORDS = "the cat sat on mat . a dog ran in park mr. smith".split()
ARTICLES = {"raw": ["The cat sat on the mat. Mr. Smith ran.", "A dog ran in the park. The cat sat.", "The mat."],
            "pretokenized": ["the cat sat on the mat . mr. smith ran .", "a dog ran in the park . the cat sat .",
                             "the mat ."]}
MAX_LEN, MIN_LEN = 12, 2


def write_checkpoint(path, pretokenized: bool) -> tuple[PointerGenerator, Vocabulary]:
    """An untrained pointer-generator's checkpoint, as a run of data read raw or pretokenized writes it."""
    vocab = Vocabulary(WORDS)
    torch.manual_seed(0)
    model = PointerGenerator(PointerGeneratorConfig(vocab_size=len(vocab), emb_dim=8, hidden_dim=8))
    checkpoint = {"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}
    module = SummarizationModule(model, vocab, partial(torch.optim.Adam))
    module.reading = data_reading(pretokenized, 400, MAX_LEN)
    module.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, path)
    return model.eval(), vocab


def one_by_one(model: PointerGenerator, vocab: Vocabulary, article: str, pretokenized: bool) -> list[str]:
    """The summary's tokens, the article decoded alone from its own tokenization."""
    tokens = [t for sentence in tokenize_sentences(article, pretokenized) for t in sentence]
    batch = collate([Example("x", tokens, None)], vocab, 400, MAX_LEN)
    decoded = beam_search(model, model.encode(batch), beam_size=3, max_len=MAX_LEN,
                          processors=[MinLength(MIN_LEN), BlockRepeatedTrigrams()])
    return vocab.decode(decoded.ids[0, : decoded.lengths[0]].tolist(), batch.oovs[0])


@pytest.mark.parametrize("reading", ["pretokenized", "raw"])
def test_each_format_gives_each_article_its_summary_in_input_order(tmp_path, reading):
    model, vocab = write_checkpoint(tmp_path / "best.ckpt", reading == "pretokenized")
    articles = ARTICLES[reading]
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "a", "article": articles[0]}) + "\n" +
                                       json.dumps({"article": articles[1]}) + "\n" +
                                       json.dumps({"id": 7, "article": articles[2], "other": 1}) + "\n")
    with (tmp_path / "in.csv").open("w", newline="") as f:
        csv.writer(f).writerows([["id", "article"], *[[f"c{i}", a] for i, a in enumerate(articles)]])
    (tmp_path / "in.txt").write_text(f"{articles[0]}\n\n{articles[1]}\n{articles[2]}\n")
    with torch.no_grad():
        expected = [one_by_one(model, vocab, article, reading == "pretokenized") for article in articles]
    ids = {"jsonl": ["a", "2", "7"], "csv": ["c0", "c1", "c2"], "txt": ["1", "3", "4"]}  # the input's, or line numbers
    for kind, wanted in ids.items():
        out = tmp_path / f"out_{kind}.jsonl"
        load_script("summarize").main(["--checkpoint", str(tmp_path / "best.ckpt"), "--input",
                                       str(tmp_path / f"in.{kind}"), "--output", str(out), "--beam-size", "3",
                                       "--min-length", str(MIN_LEN), "--block-trigrams", "--batch-size", "2",
                                       *(["--tokenized"] if reading == "pretokenized" else [])])
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["id"] for r in rows] == wanted
        assert [r["summary"].split() for r in rows] == expected
    assert all(len(tokens) >= MIN_LEN for tokens in expected)


def test_raw_news_reaches_a_model_of_pretokenized_news_as_its_training_words(tmp_path, monkeypatch, capsys):
    """A model trained on See et al.'s PTB-tokenized CNN/DM, given an article pasted from the web: its punctuation is
    split off as in training ("owner ,", "did n't"), not left on the words; an empty summary is counted."""
    write_checkpoint(tmp_path / "best.ckpt", pretokenized=True)
    (tmp_path / "news.txt").write_text("The dog's owner, Bob Smith, didn't come. Two deaths were reported.\n")
    summarize = load_script("summarize")
    read = []
    monkeypatch.setattr(summarize, "summarize", lambda model, vocab, examples, *a: read.extend(examples) or [""])
    summarize.main(["--checkpoint", str(tmp_path / "best.ckpt"), "--input", str(tmp_path / "news.txt"), "--output",
                    str(tmp_path / "out.jsonl")])
    assert read[0].source == ["the", "dog", "'s", "owner", ",", "bob", "smith", ",", "did", "n't", "come", ".", "two",
                              "deaths", "were", "reported", "."]
    assert "warning: 1 of 1 summaries came out empty" in capsys.readouterr().err


@pytest.mark.parametrize("content,where", [
    ('{"article": "the cat ."}\n{"article": "the dog ." \n', "in.jsonl:2: malformed JSON"),
    ('{"article": "the cat ."}\n{"text": "the dog ."}\n', "in.jsonl:2: missing field 'article'"),
    ('{"article": "the cat ."}\n\n{"article": "  "}\n', "in.jsonl:3: the article is empty"),
    ('{"id": 1, "article": "the cat ."}\n{"id": "1", "article": "the dog ."}\n', "in.jsonl:2: id '1' is also"),
])
def test_a_bad_line_is_one_line_naming_file_and_line_before_any_decoding(tmp_path, monkeypatch, content, where):
    write_checkpoint(tmp_path / "best.ckpt", pretokenized=True)
    (tmp_path / "in.jsonl").write_text(content)
    summarize = load_script("summarize")
    monkeypatch.setattr(summarize, "summarize", lambda *a: pytest.fail("decoded before reading every line"))
    monkeypatch.setattr(sys, "argv", ["sumrl-summarize", "--checkpoint", str(tmp_path / "best.ckpt"), "--input",
                                      str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.jsonl")])
    with pytest.raises(SystemExit) as stopped:
        summarize.cli()
    message = str(stopped.value.code)
    assert message.startswith(f"error: {tmp_path / where.split(':')[0]}:") and where in message
    assert "\n" not in message and not (tmp_path / "out.jsonl").exists()


def test_a_checkpoint_that_is_not_a_summarizers_is_refused_in_one_line(tmp_path, monkeypatch):
    (tmp_path / "in.txt").write_text("the cat .\n")
    summarize = load_script("summarize")
    for checkpoint, said in ((tmp_path / "none.ckpt", "not found"), (tmp_path / "in.txt", "not a checkpoint file")):
        monkeypatch.setattr(sys, "argv", ["sumrl-summarize", "--checkpoint", str(checkpoint), "--input",
                                          str(tmp_path / "in.txt"), "--output", str(tmp_path / "out.jsonl")])
        with pytest.raises(SystemExit) as stopped:
            summarize.cli()
        assert said in str(stopped.value.code) and "\n" not in str(stopped.value.code)


def test_an_exported_folder_summarizes_as_its_checkpoint_and_carries_a_hub_model_card(tmp_path, capsys, monkeypatch):
    """sumrl-export: weights, config, vocabulary and a model card that huggingface_hub reads; sumrl-summarize decodes
    the folder as it decodes the checkpoint; a second export into it, or a damaged folder, is one line."""
    from huggingface_hub import ModelCard
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    write_checkpoint(tmp_path / "run" / "checkpoints" / "best.ckpt", pretokenized=False)
    (tmp_path / "run" / "results.json").write_text(json.dumps({"n": 3, "rougeL": 12.5, "greedy": {"rougeL": 1.0}}))
    load_script("export").main([str(tmp_path / "run"), str(tmp_path / "exported")])
    assert "exported" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "exported").iterdir()) == sorted(
        ["model.safetensors", "config.json", "vocab.txt", "README.md"])
    assert (tmp_path / "exported" / "vocab.txt").read_text().split("\n")[:-1] == Vocabulary(WORDS).itos
    card = ModelCard.load(tmp_path / "exported" / "README.md")
    assert card.data.library_name == "sumrl" and card.data.pipeline_tag == "summarization"
    assert "| rougeL | 12.50 |" in card.text
    (tmp_path / "news.txt").write_text("".join(f"{a}\n" for a in ARTICLES["raw"]))
    for source in ("run/checkpoints/best.ckpt", "exported"):
        load_script("summarize").main(["--checkpoint", str(tmp_path / source), "--input", str(tmp_path / "news.txt"),
                                       "--output", str(tmp_path / f"{source.replace('/', '_')}.jsonl"),
                                       "--beam-size", "3", "--min-length", str(MIN_LEN), "--block-trigrams"])
    assert ((tmp_path / "exported.jsonl").read_text() ==
            (tmp_path / "run_checkpoints_best.ckpt.jsonl").read_text())
    monkeypatch.setattr(sys, "argv", ["sumrl-export", str(tmp_path / "run"), str(tmp_path / "exported")])
    with pytest.raises(SystemExit, match=r"exists: give a new folder, or --force to replace it$"):
        load_script("export").cli()
    (tmp_path / "exported" / "model.safetensors").write_bytes(b"not weights")
    monkeypatch.setattr(sys, "argv", ["sumrl-summarize", "--checkpoint", str(tmp_path / "exported"), "--input",
                                      str(tmp_path / "news.txt"), "--output", str(tmp_path / "x.jsonl")])
    with pytest.raises(SystemExit, match=r"exported: cannot read its files \(SafetensorError"):
        load_script("summarize").cli()
