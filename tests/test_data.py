import gzip
import json
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from models.text.batch import Example, collate
from models.text.records import DataError
from models.text.vocab import Vocabulary, split_sentences, tokenize_sentences
from trainer.data import RatioSplit, SummarizationData, tokenize_records
from trainer.demo import FIRST, DemoCorpus
from trainer.sources import Fields, HubDataset, LocalFile

ROOT = Path(__file__).resolve().parents[1]


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_vocabulary_round_trip_and_oov_mapping(tmp_path):
    vocab = Vocabulary.build([["a", "b", "b", "c", "c", "c"]], size=6)
    assert vocab.itos[4:] == ["c", "b"]  # most frequent first, size counts the 4 specials
    vocab.save(tmp_path / "v.txt")
    assert Vocabulary.load(tmp_path / "v.txt") == vocab

    oovs: list[str] = []
    ids = vocab.extended_ids(["c", "zork", "b", "zork", "a"], oovs)
    assert oovs == ["zork", "a"]
    assert ids == [4, 6, 5, 6, 7]
    assert vocab.ids(["c", "zork"]) == [4, vocab.unk_id]
    assert vocab.decode(ids + [vocab.eos_id, 4], oovs) == ["c", "zork", "b", "zork", "a"]


def test_collate_extended_ids_targets_and_reference_only_oovs():
    vocab = Vocabulary(["the", "cat", "sat", "."])
    ex = Example("1", ["the", "zorblax", "sat", "."], [["zorblax", "sat", "."], ["the", "quimbey", "."]])
    batch = collate([ex, Example("2", ["the", "cat"], None)], vocab, max_target_len=100)
    V = len(vocab)
    assert batch.oovs[0] == ["zorblax", "quimbey"] and batch.n_copy_oovs == 1
    assert batch.src[0].tolist() == [4, vocab.unk_id, 6, 7]
    assert batch.src_ext[0].tolist() == [4, V, 6, 7]
    # the copyable OOV keeps its extended id; the reference-only one is <unk> for the model ...
    assert batch.target[0].tolist() == [V, 6, 7, 4, vocab.unk_id, 7, vocab.eos_id]
    assert batch.dec_in[0].tolist() == [vocab.bos_id, vocab.unk_id, 6, 7, 4, vocab.unk_id, 7]
    # ... but distinct on the reward side, with sentence indices
    assert batch.ref[0].tolist() == [V, 6, 7, 4, V + 1, 7]
    assert batch.ref_sentence[0].tolist() == [0, 0, 0, 1, 1, 1]
    assert batch.ref_lens.tolist() == [6, 0]
    assert batch.has_reference.tolist() == [True, False]
    assert not batch.target_mask[1].any()


def test_special_tokens_written_in_the_text_are_words_not_special_ids():
    # A literal </s> in pretokenized text became the end-of-summary id mid-target (and <s> the start id).
    vocab = Vocabulary(["a", "b", "."])
    batch = collate([Example("1", ["a", "<s>", "b", "</s>"], [["a", "</s>", "b", "."]])], vocab)
    V, specials = len(vocab), {vocab.pad_id, vocab.bos_id, vocab.eos_id}
    assert batch.oovs[0] == ["<s>", "</s>"] and batch.src_ext[0].tolist() == [4, V, 5, V + 1]
    assert not specials & set(batch.src[0].tolist())
    assert batch.target[0].tolist() == [4, V + 1, 5, 6, vocab.eos_id]  # one end, at the end
    assert vocab.decode(batch.target[0].tolist(), batch.oovs[0]) == ["a", "</s>", "b", "."]


def test_truncated_target_has_no_eos():
    vocab = Vocabulary(["a"])
    batch = collate([Example("1", ["a"], [["a"] * 10])], vocab, max_target_len=5)
    assert batch.target[0].tolist() == [4] * 5
    assert batch.ref.size(1) == 10  # the reward sees the full reference


def test_bad_jsonl_line_names_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": 1, "article": "a b", "highlights": "c"}, "{not json"])
    with pytest.raises(DataError, match=r"d\.jsonl:2: malformed JSON"):
        list(LocalFile(str(path)).records())


@pytest.mark.parametrize("row, message", [
    ({"id": 1, "highlights": "x"}, r"d\.jsonl:1: missing field 'article'"),
    ({"id": 1, "article": 3, "highlights": "x"}, r"d\.jsonl:1: field 'article' must be a string, got int"),
    (["a"], r"d\.jsonl:1: expected an object"),
])
def test_bad_fields_are_named(tmp_path, row, message):
    path = write_jsonl(tmp_path / "d.jsonl", [row])
    with pytest.raises(DataError, match=message):
        list(LocalFile(str(path)).records())


@pytest.mark.parametrize("name, content, message", [
    ("d.jsonl", b'{"id": 1, "article": "a", "highlights": "b"}\n{"id": 2, "article": "caf\xe9"}\n',
     r"d\.jsonl:2: invalid UTF-8 \(byte 26 of the line\)"),
    ("d.csv", b"id,article,highlights\n1,a,b\n2,caf\xe9,b\n", r"d\.csv:3: invalid UTF-8 \(byte 6 of the line\)"),
    ("d.csv", b"id,article,highlights\n1,a,b,c\n", r"d\.csv:2: more values than the header's 3 field names"),
    ("d.jsonl", b'{"id": 1, "article": "a \\ud800 b", "highlights": "c"}\n',
     r"d\.jsonl:1: field 'article' holds a lone surrogate at character 3"),
    ("d.jsonl", b'{"id": "\\udc00", "article": "a", "highlights": "c"}\n',
     r"d\.jsonl:1: field 'id' holds a lone surrogate at character 1"),
])
def test_undecodable_text_is_named_by_file_line_and_field(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError, match=message):
        list(LocalFile(str(path)).records())


@pytest.mark.parametrize("name", ["d.jsonl.gz", "d.csv.gz"])
def test_gzipped_jsonl_and_csv_files_are_read(tmp_path, name):
    # data=local with a .jsonl.gz said "unknown format 'gz'", although the reader reads gzip
    rows = [{"id": "x1", "article": "a b .", "highlights": "a ."}, {"id": "x2", "article": "c d .", "highlights": "c ."}]
    text = "".join(json.dumps(r) + "\n" for r in rows) if "jsonl" in name else "id,article,highlights\n" + "".join(
        f"{r['id']},{r['article']},{r['highlights']}\n" for r in rows)
    (tmp_path / name).write_bytes(gzip.compress(text.encode()))
    records = list(LocalFile(str(tmp_path / name)).records())
    assert [(r.id, r.article, r.summary) for r in records] == [(r["id"], r["article"], r["highlights"]) for r in rows]


def test_csv_and_configurable_fields(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("key,text,tldr\nx1,The cat sat. It slept.,A cat sat.\nx2,Hello world.,\n")
    source = LocalFile(str(path), fields=Fields(article="text", summary="tldr", id="key"))
    examples = tokenize_records(source, pretokenized=False)
    assert len(examples) == 1  # the empty summary is skipped
    assert examples[0].id == "x1"
    assert examples[0].source == ["the", "cat", "sat", ".", "it", "slept", "."]
    assert examples[0].reference == [["a", "cat", "sat", "."]]


def test_hub_loader_code_path_on_a_local_file(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": f"i{i}", "article": f"w{i} x .", "highlights": f"w{i}"}
                                              for i in range(5)])
    source = HubDataset(path="json", name=None, split="train", data_files=str(path))
    records = list(source.records())
    assert [r.id for r in records] == [f"i{i}" for i in range(5)]
    assert records[2].where == "json[train] row 2"


def test_an_unreachable_hub_is_one_line_at_once_and_local_files_still_load(tmp_path, monkeypatch):
    # offline, `datasets` retried each file five times (23 s), printed each warning twice, then a 30-line traceback
    import datasets
    from huggingface_hub import constants
    monkeypatch.setattr("trainer.sources.hub_reachable", lambda timeout=3.0: False)
    started = time.perf_counter()
    with pytest.raises(DataError, match=r"^someone/nothing\[train\]: the Hugging Face hub cannot be reached from here "
                                        r"and no copy is cached, .* read local files: data=local data\.train\.path="):
        list(HubDataset(path="someone/nothing", name=None, split="train").records())
    assert time.perf_counter() - started < 10
    assert (datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE) == (False, False)  # as they were
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": "i0", "article": "w x .", "highlights": "w"}])
    assert [r.id for r in HubDataset(path="json", name=None, data_files=str(path)).records()] == ["i0"]


@pytest.mark.parametrize("overrides, path, name, article", [
    (["data=xsum"], "EdinburghNLP/xsum", None, "document"),
    (["data=hub", "data.train.path=EdinburghNLP/xsum", "data.train.name=null", "data.train.fields.article=document"],
     "EdinburghNLP/xsum", None, "document"),
    (["data=cnndm"], "abisee/cnn_dailymail", "3.0.0", "article"),
])
def test_a_hub_dataset_is_named_once_and_its_three_splits_follow(overrides, path, name, article):
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        data = compose("train", overrides=overrides).data
    splits = {s: OmegaConf.to_container(data[s], resolve=True) for s in ("train", "val", "test")}
    assert {s: (c["path"], c["name"], c["split"], c["fields"]["article"]) for s, c in splits.items()} == {
        "train": (path, name, "train", article), "val": (path, name, "validation", article),
        "test": (path, name, "test", article)}


def test_tokenizer_ptb_like_and_pretokenized():
    assert tokenize_sentences("He didn't go. She did!") == [["he", "did", "n't", "go", "."], ["she", "did", "!"]]
    assert tokenize_sentences("a b .\nc d .", pretokenized=True) == [["a", "b", "."], ["c", "d", "."]]
    assert tokenize_sentences("a b . c d", pretokenized=True) == [["a", "b", "."], ["c", "d"]]


def test_raw_text_keeps_abbreviations_initials_decimals_and_quotes_inside_their_sentences():
    text = ('Mr. Smith met the U.S. President at 3 p.m. on Jan. 5 in Washington. J. K. Rowling paid $3.50 (approx. '
            'half). "We will win," he said. "Nobody doubts it." Dr. Doe, Ph.D., agreed... mostly.\nA new line.')
    assert split_sentences(text) == [
        "Mr. Smith met the U.S. President at 3 p.m. on Jan. 5 in Washington.", "J. K. Rowling paid $3.50 (approx. half).",
        '"We will win," he said.', '"Nobody doubts it."', "Dr. Doe, Ph.D., agreed... mostly.", "A new line."]
    assert tokenize_sentences("The U.S. President spoke. He left.") == [
        ["the", "u.s.", "president", "spoke", "."], ["he", "left", "."]]  # split while cased, then lower-cased


def test_pretokenized_text_keeps_its_splitting_at_every_sentence_final_token(monkeypatch):
    """Every number measured on the shared sample rests on it: no raw-text splitter comes near pretokenized text."""
    monkeypatch.setattr("models.text.vocab.segmenter", None)
    text = "mr. smith met the u.s. president at 3 p.m. . he paid $ 3.50 . `` fine , '' he said . j. k. rowling"
    assert tokenize_sentences(text, pretokenized=True) == [
        ["mr.", "smith", "met", "the", "u.s.", "president", "at", "3", "p.m.", "."], ["he", "paid", "$", "3.50", "."],
        ["``", "fine", ",", "''", "he", "said", "."], ["j.", "k.", "rowling"]]


def test_ratio_split_exclusions_and_vocab_cache(tmp_path):
    exclude = tmp_path / "heldout.tsv"
    exclude.write_text("id\theldout_sets\ndemo-00001\tx\ndemo-00002\ty\n")
    kwargs = dict(train=DemoCorpus(200, seed=1), split=RatioSplit(0.8, 0.1, 0.1, seed=3), exclude_ids=str(exclude),
                  pretokenized=True, vocab_size=300, cache_dir=str(tmp_path / "cache"), name="t")
    data = SummarizationData(**kwargs)
    data.setup()
    ids = {k: {e.id for e in v} for k, v in data.splits.items()}
    assert {"demo-00001", "demo-00002"} <= ids["test"]
    assert not ({"demo-00001", "demo-00002"} & (ids["train"] | ids["val"]))
    assert sum(len(v) for v in ids.values()) == 200 and len(ids["train"]) == round(0.8 * 198)
    assert len(list((tmp_path / "cache" / "vocab").iterdir())) == 1
    again = SummarizationData(**kwargs)
    again.setup()
    assert again.vocab == data.vocab and again.splits["train"][0].id == data.splits["train"][0].id
    batch = next(iter(data.train_dataloader()))
    assert batch.src.shape[0] == 16


def test_held_out_ids_stay_out_of_training_with_csv_files_saved_with_a_byte_order_mark(tmp_path, caplog):
    # A spreadsheet program's BOM made the header's `id` another name: ids became row numbers, and held-out articles
    # (none of whose ids matched any more) went into train and val.
    path = tmp_path / "d.csv"
    path.write_bytes("\ufeffid,article,summary\n".encode() + "".join(
        f"a{i:02d},word{i} x y .,word{i} .\n" for i in range(40)).encode())
    exclude = tmp_path / "heldout.csv"
    exclude.write_bytes("\ufeffid\n".encode() + "".join(f"a{i:02d}\n" for i in range(10)).encode())
    data = SummarizationData(LocalFile(str(path), fields=Fields(summary="summary")), split=RatioSplit(0.5, 0.25, 0.25),
                             exclude_ids=str(exclude), pretokenized=True, cache_dir=str(tmp_path / "cache"), name="t")
    data.setup()
    ids = {k: {e.id for e in v} for k, v in data.splits.items()}
    held_out = {f"a{i:02d}" for i in range(10)}
    assert held_out <= ids["test"] and not held_out & (ids["train"] | ids["val"])
    assert "exclude_ids" not in caplog.text  # every id of the list matched


def test_a_misspelt_id_field_is_an_error_naming_it_not_row_numbers(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": "x1", "article": "a b .", "highlights": "a ."}])
    with pytest.raises(DataError, match=r"d\.jsonl:1: no id in field 'idd' \(fields\.id; fields present: \['article', "
                                        r"'highlights', 'id'\]\): name the id field, or set fields\.id=null"):
        list(LocalFile(str(path), fields=Fields(id="idd")).records())
    assert [r.id for r in LocalFile(str(path), fields=Fields(id=None)).records()] == ["0"]


def test_exclude_ids_that_match_no_id_are_an_error_and_a_partial_match_is_counted(tmp_path, caplog):
    kwargs = dict(train=DemoCorpus(200, seed=1), split=RatioSplit(0.8, 0.1, 0.1), pretokenized=True, vocab_size=300,
                  cache_dir=str(tmp_path / "cache"), name="t")
    exclude = tmp_path / "heldout.tsv"
    exclude.write_text("id\theldout_sets\nsee2017-test-000004\tqags\nsee2017-test-000011\tqags\n")
    with pytest.raises(DataError, match=rf"^data\.exclude_ids {exclude}: none of its 2 ids is an id of data 't' "
                                        r"\(its ids: 'see2017-test-000004', 'see2017-test-000011'; the data's: "
                                        r"'demo-00000', "):
        SummarizationData(**kwargs, exclude_ids=str(exclude)).setup()
    exclude.write_text("id\theldout_sets\ndemo-00001\tqags\nsee2017-test-000004\tqags\n")
    SummarizationData(**kwargs, exclude_ids=str(exclude)).setup()
    assert (f"data.exclude_ids {exclude}: 1 of its 2 ids are ids of data 't' and kept out; the other 1 "
            "('see2017-test-000004') are not in the data") in caplog.text


def test_training_data_without_summaries_is_an_error_naming_the_file(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": i, "article": f"a b {i} ."} for i in range(20)])
    data = SummarizationData(LocalFile(str(path), fields=Fields(summary=None)), split=RatioSplit(0.5, 0.25, 0.25),
                             cache_dir=str(tmp_path / "cache"))
    with pytest.raises(DataError, match=r"no training example of .*d\.jsonl has a summary"):
        data.setup()


@pytest.mark.parametrize("setting, value", [("test_size", -1), ("val_sample_size", -5), ("max_target_len", 0),
                                            ("max_source_len", 0), ("batch_size", 0)])
def test_sizes_below_one_are_rejected_naming_the_setting(setting, value):
    with pytest.raises(ValueError, match=rf"data\.{setting} must be at least 1, got {value}"):
        SummarizationData(DemoCorpus(10), split=RatioSplit(), **{setting: value})


def test_demo_corpus_is_deterministic_and_needs_copying():
    a = [(r.article, r.summary) for r in DemoCorpus(50, seed=0).records()]
    assert a == [(r.article, r.summary) for r in DemoCorpus(50, seed=0).records()]
    assert a != [(r.article, r.summary) for r in DemoCorpus(50, seed=1).records()]
    # every summary sentence names a person (first name + invented surname) found in its article
    for article, summary in a:
        for line in summary.split("\n"):
            words = line.split()
            first = next(i for i, w in enumerate(words) if w in FIRST)
            assert " ".join(words[first:first + 2]) in article


def test_damaged_vocabulary_cache_is_rebuilt_not_used(tmp_path, caplog):
    kwargs = dict(train=DemoCorpus(200, seed=1), split=RatioSplit(0.8, 0.1, 0.1), pretokenized=True,
                  vocab_size=300, cache_dir=str(tmp_path / "cache"), name="t")
    data = SummarizationData(**kwargs)
    data.setup()
    (cached,) = (tmp_path / "cache" / "vocab").iterdir()
    cached.write_bytes(cached.read_bytes()[:300])  # a write cut short (the old writer wrote in place)
    again = SummarizationData(**kwargs)
    again.setup()
    assert again.vocab == data.vocab and len(again.vocab) == 300
    assert "is damaged" in caplog.text and [p.name for p in (tmp_path / "cache" / "vocab").iterdir()] == [cached.name]


def test_duplicate_ids_are_refused_at_load_naming_the_file_and_both_lines(tmp_path):
    # 10 and "10" are one id once read (ids are strings): table4 pairs test summaries by id
    path = write_jsonl(tmp_path / "dup.jsonl", [{"id": 10, "article": "a b .", "highlights": "a ."},
                                                {"id": 11, "article": "c d .", "highlights": "c ."},
                                                {"id": "10", "article": "e f .", "highlights": "e ."}])
    with pytest.raises(DataError, match=r"dup\.jsonl:3: id '10' is also the id of .*dup\.jsonl:1$"):
        tokenize_records(LocalFile(str(path)), pretokenized=True)


@pytest.mark.parametrize("test_rows, shared", [
    ([{"id": "a1", "article": "x y z .", "highlights": "x ."}], None),  # an id of train's, another article: fine
    ([{"id": "t1", "article": "c d .", "highlights": "c ."}], "e.g. 't1' \\(there 'a2'\\)"),  # another id, same text
])
def test_a_test_source_that_shares_articles_with_training_is_refused(tmp_path, test_rows, shared):
    rows = [{"id": "a1", "article": "a b .", "highlights": "a ."}, {"id": "a2", "article": "c d .", "highlights": "c ."}]
    train, val = write_jsonl(tmp_path / "train.jsonl", rows), write_jsonl(tmp_path / "val.jsonl", [
        {"id": "v1", "article": "e f .", "highlights": "e ."}])
    test = write_jsonl(tmp_path / "test.jsonl", test_rows)
    data = SummarizationData(train=LocalFile(str(train)), val=LocalFile(str(val)), test=LocalFile(str(test)),
                             pretokenized=True, cache_dir=str(tmp_path / "cache"), name="t")
    if shared is None:
        data.setup()
        return
    with pytest.raises(DataError, match=rf"split 'test' \(.*test.jsonl\) shares 1 articles with split 'train' "
                                        rf"\(.*train.jsonl\), {shared}"):
        data.setup()


def test_a_test_source_beside_a_ratio_split_is_refused_not_ignored(tmp_path):
    # data=local has a ratio split: `+data.test=...` trained and tested on the split's own test part, exit 0
    train = write_jsonl(tmp_path / "train.jsonl", [{"id": f"a{i}", "article": "a b .", "summary": "a ."}
                                                   for i in range(20)])
    with pytest.raises(ValueError, match=r"^data\.test would be ignored: data\.split divides data\.train .* give "
                                         r"data\.split=null"):
        SummarizationData(train=LocalFile(str(train)), test=LocalFile(str(train)), split=RatioSplit(0.8, 0.1, 0.1))
