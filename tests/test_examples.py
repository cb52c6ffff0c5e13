"""What the model writes as it learns (issue 25): the validation examples (a fixed set of articles, drawn without
touching the training RNG), the training-step statistics, and table4's examples."""
import json
import statistics
import warnings
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from rouge_score import rouge_scorer

from conftest import run_config
from models.decoding import greedy
from rewards.base import Reward, RewardInput, WeightedSum
from rewards.rouge import RougeL
from test_rl import tiny_module
from test_scripts import load_script
from test_train import compose_run, logged
from models.text.batch import Example
from models.text.ngrams import distinct_ngram_ratio
from trainer.examples import choose_articles, example_rows
from trainer.run import run


# ---------------------------------------------------------------- training-step statistics

class HandMade(Reward):
    """A reward fixed by hand for each decoded row: article i's k samples at rows i·k …, then the greedy rows."""

    needs_reference = False

    def __init__(self, name: str, values: list[float]):
        self.name, self.values = name, torch.tensor(values)

    def __call__(self, inputs):
        return self.values.clone()


SAMPLES = [[1, 0], [0.5, 0.5], [0, 0], [0.25, 0.75], [1, 1], [0, 0.5]]  # 6 articles, k = 2
GREEDY = [1, 0.5, 0, 0.75, 0.875, 0.5]
# advantages [0 −1] [0 0] [0 0] [−.5 0] [.125 .125] [−.5 0]: 7 of the 12 samples are exactly 0


def test_zero_advantage_share_and_term_statistics_on_hand_made_rewards():
    flat = [r for pair in SAMPLES for r in pair]
    reward = WeightedSum({"a": HandMade("a", flat + GREEDY), "b": HandMade("b", [0.5] * 18)}, {"a": 1.0, "b": 1.0})
    module, batch = tiny_module(reward=reward)
    module.objective.samples = 2
    logged_values = {}
    module.log = lambda key, value, **kwargs: logged_values.__setitem__(key, float(value))
    module.training_step(batch, 0)
    assert logged_values["train/zero_advantage"] == pytest.approx(7 / 12)
    assert logged_values["train/reward/a"] == pytest.approx(statistics.mean(flat))
    assert logged_values["train/reward/a_std"] == pytest.approx(statistics.stdev(flat), rel=1e-6)
    assert logged_values["train/reward/b_std"] == 0.0


def test_distinct_trigram_ratio_by_hand():
    # row 0: 5 6 7 5 6 7 → 567 675 756 567; row 1: 5 6 7 8 (then padding that must not count) → 567 678
    ids = torch.tensor([[5, 6, 7, 5, 6, 7], [5, 6, 7, 8, 9, 9]])
    ratio = distinct_ngram_ratio(ids, torch.tensor([6, 4]), base=10)
    assert float(ratio) == pytest.approx(4 / 6)  # distinct: 567 675 756 678


# ---------------------------------------------------------------- the validation examples

def examples(ids: list[str]) -> list[Example]:
    return [Example(i, ["w"], [["w", "."]]) for i in ids]


def test_the_articles_are_chosen_by_seed_whatever_the_order():
    ids = [f"a{i:02d}" for i in range(30)]
    chosen = [e.id for e in choose_articles(examples(ids), 8, seed=0)]
    assert len(set(chosen)) == 8 and chosen == sorted(chosen)
    assert [e.id for e in choose_articles(examples(ids[::-1]), 8, seed=0)] == chosen
    assert [e.id for e in choose_articles(examples(ids), 8, seed=1)] != chosen
    assert len(choose_articles(examples(ids[:3]), 8, seed=0)) == 3


def test_the_articles_are_the_same_for_every_data_order(tmp_path):
    chosen = []
    for shuffle_seed in (0, 1):
        data = instantiate(compose_run(tmp_path, "x", [f"data.shuffle_seed={shuffle_seed}"]).data)
        data.setup()
        chosen.append([e.id for e in choose_articles(data.val_dataloader().dataset, 8, seed=0)])
    assert chosen[0] == chosen[1] and len(chosen[0]) == 8


class TokensPerHundred(Reward):
    name, needs_reference = "length", False  # the name of a built-in field of the examples

    def __call__(self, inputs):
        return inputs.hyp_lens.float() / 100


class CountedRougeL(RougeL):
    """ROUGE-L, counting the rows of each call."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __call__(self, inputs):
        self.calls.append(len(inputs.hyp))
        return super().__call__(inputs)


def test_example_rows_score_the_greedy_summary_and_the_training_sample_leaves_the_rng_alone():
    module, batch = tiny_module(reward=CountedRougeL())
    module.metrics = {"length": TokensPerHundred()}
    labelled = batch.index_select([i for i in range(len(batch)) if batch.has_reference[i]])
    module.model.eval()
    module.beam["max_len"] = 8
    with torch.no_grad():
        rows = example_rows(module, labelled, module.validation_step(labelled, 0))
        assert module.reward.calls == [len(labelled)]  # validation scores the batch once; the examples reuse it
        plain = greedy(module.model, module.model.encode(labelled), 8)
        state = torch.get_rng_state()
        draw = module.objective.training_samples
        drawn = draw(module.model, module.vocab, labelled, torch.Generator().manual_seed(0))
        assert torch.equal(torch.get_rng_state(), state)  # drawn from its own generator
        again = draw(module.model, module.vocab, labelled, torch.Generator().manual_seed(0))
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    for row in rows:
        reference = scorer.score("the cat sat .", row["summary"])["rougeL"].fmeasure
        assert row["score/rougeL"] == pytest.approx(100 * reference)
        assert row["length"] == len(row["summary"].split())  # a metric of that name cannot overwrite it
        assert row["score/length"] == pytest.approx(len(row["summary"].split()) / 100)
    tokens = [" ".join(module.vocab.decode(ids[:n], labelled.oovs[i])) for i, (ids, n) in
              enumerate(zip(plain.ids.tolist(), plain.lengths.tolist()))]
    assert [r["summary"].replace("\n", " ") for r in rows] == tokens  # the greedy decodes of validation
    lcs = RougeL()  # the training reward, ROUGE-L's LCS F on the ids: "the cat sat ." is every reference
    expected = lcs(RewardInput.from_texts([t.split() for t in tokens], [[["the", "cat", "sat", "."]]] * len(rows),
                                          module.vocab))
    assert [r["reward"] for r in rows] == pytest.approx(expected.tolist())
    assert [r["id"] for r in drawn] == labelled.ids and drawn == again


MIXED = ["reward=rouge_l", "trainer.val_check_interval=3", "test=false", "threads=1", "stages.mixed.lr=1e-3",
         "module.examples_to_log=4"]


def sample_ids(run_dir: Path) -> dict[int, list[str]]:
    return {int(p.stem.removeprefix("step_")): [json.loads(line)["id"] for line in p.open()]
            for p in (run_dir / "examples").glob("step_*.jsonl")}


@pytest.mark.slow
def test_examples_stay_across_a_resume_and_data_orders_and_leave_training_alone(tmp_path):
    run(compose_run(tmp_path, "mle", ["reward=mle", "trainer.max_steps=20", "test=false", "threads=1"]))
    start = f"mle_checkpoint={tmp_path / 'mle' / 'checkpoints' / 'best.ckpt'}"
    run(compose_run(tmp_path, "a", [*MIXED, start, "trainer.max_steps=6"]))
    last = tmp_path / "a" / "checkpoints" / "last.ckpt"
    run(compose_run(tmp_path, "a", [*MIXED, start, "trainer.max_steps=9", f"ckpt_path={last}"]))
    run(compose_run(tmp_path, "other_order", [*MIXED, start, "trainer.max_steps=3", "data.shuffle_seed=1"]))
    run(compose_run(tmp_path, "off", [*MIXED, start, "trainer.max_steps=6", "module.examples_to_log=0"]))
    resumed, other = sample_ids(tmp_path / "a"), sample_ids(tmp_path / "other_order")
    assert sorted(resumed) == [0, 3, 6, 9] and sorted(other) == [0, 3]
    assert len({tuple(ids) for ids in [*resumed.values(), *other.values()]}) == 1 and len(resumed[0]) == 4
    assert not (tmp_path / "off" / "examples").exists()
    assert logged(tmp_path / "a", "train/loss") == logged(tmp_path / "off", "train/loss")  # exactly


# ---------------------------------------------------------------- table4 --examples

def test_examples_are_the_largest_spread_with_seeded_ties():
    from evaluation.reports import choose_examples
    scores = {"A": {"a": {"m": 10}, "b": {"m": 20}, "c": {"m": 30}},
              "B": {"a": {"m": 10}, "b": {"m": 50}, "c": {"m": 35}}}
    assert choose_examples(scores, ["m"], 3, seed=0) == ["b", "c", "a"]  # spreads 30, 5, 0
    tied = {row: {f"t{i:02d}": {"m": float(row == "A")} for i in range(40)} for row in "AB"}
    first = choose_examples(tied, ["m"], 2, seed=0)
    assert choose_examples(tied, ["m"], 2, seed=0) == first
    assert choose_examples(tied, ["m"], 2, seed=1) != first
    with warnings.catch_warnings():  # a metric no row scored (the news grid's control): numpy's warnings on stdout
        warnings.simplefilter("error")
        assert choose_examples(scores, ["m", "unscored"], 3, seed=0) == ["b", "c", "a"]


def write_run(folder: Path, name: str, run_id: str, lineage: list[str], summaries: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    reward = RougeL() if name == "rouge_l" else None
    (folder / "config.yaml").write_text(run_config(name, reward, seed=0, run_id=run_id, lineage=lineage))
    with (folder / "summaries.jsonl").open("w") as f:
        for article, summary in summaries.items():
            f.write(json.dumps({"id": article, "summary": summary, "reference": "the cat sat on the mat .",
                                "scores": {}}) + "\n")
    return folder


def test_table4_examples_pick_the_same_articles_twice(tmp_path, capsys):
    table4 = load_script("table4")
    same = {f"d{i}": "the cat sat on a mat ." for i in range(8)}
    mle = write_run(tmp_path / "mle", "mle", "m1", [], same)
    # d3 loses every word (the largest spread), d5 half of them; the other articles are summarised alike
    write_run(tmp_path / "rouge_l", "rouge_l", "r1", ["m1"], same | {"d3": "dogs ran .", "d5": "the cat ran ."})
    blocks = []
    for _ in range(2):
        table4.main([str(mle), str(tmp_path / "rouge_l"), "--metrics", "--resamples", "20", "--examples", "2",
                     "--out", str(tmp_path)])
        markdown = (tmp_path / "table4.md").read_text()
        blocks.append(markdown[markdown.index("Examples:"):])
    assert blocks[0] == blocks[1] and blocks[0] in capsys.readouterr().out
    assert [line for line in blocks[0].splitlines() if line.startswith("Article")] == ["Article d3:", "Article d5:"]
    assert "| Mixed w/ ROUGE-L | dogs ran . | ROUGE-L 0.00 |" in blocks[0]
    assert "| reference | the cat sat on the mat . |  |" in blocks[0]
