"""Training on articles without references (Scialom et al. 2019, issue 13): the mixed sampler's fraction,
reproducibility and resumption; unlabelled rows get no MLE term and only the reward's reference-free terms, whose
reference-based terms are rescaled by 1/(1 − p); declared-unlabelled sources never expose a summary; reference-only
rewards on such data are refused before training; a 2-step mixed run with the learned QA metric."""
import json
from functools import partial
from itertools import islice
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from models.text.batch import Example, collate
from models.text.vocab import Vocabulary
from rewards.base import Reward, RewardInput, WeightedSum
from rewards.rouge import RougeL
from trainer.data import MixedShuffle, RatioSplit, SummarizationData, Unlabelled
from trainer.demo import DemoCorpus
from trainer.module import SummarizationModule
from trainer.objectives import objective_for
from trainer.schedules import Constant
from trainer.sources import Fields, LocalFile
from trainer.settings import SettingsError
from trainer.run import run

from test_resume import losses
from test_train import ROOT, compose_run, logged

# The demo corpus with a second demo corpus (the coin-flip variant, another seed) mixed in without its summaries.
UNLABELLED = ["+data.unlabelled._target_=trainer.data.Unlabelled", "+data.unlabelled.name=coin",
              "+data.unlabelled.source._target_=trainer.demo.DemoCorpus", "+data.unlabelled.source.n=80",
              "+data.unlabelled.source.seed=1", "+data.unlabelled.source.paraphrase=coin",
              "+data.unlabelled.val_size=8", "+data.unlabelled_proportion=0.5"]


@pytest.fixture(autouse=True)
def one_thread():
    """Models this small gain nothing from threads; on a shared 2-core machine two threads contend, 10× slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---------------------------------------------------------------- the mixed sampler
def draw(n_labelled=100, n_unlabelled=37, batch_size=16, per_batch=8, seed=0, start=0, steps=60, rank=0, world=1):
    """The batches of `steps` optimizer steps from step `start`, drawn as Lightning draws them: a new iterator per
    epoch, the global step one further after each batch."""
    step = [start]
    sampler = MixedShuffle(n_labelled, n_unlabelled, batch_size, per_batch, seed, steps=lambda: step[0], rank=rank,
                           world_size=world)
    batches = []
    while len(batches) < steps:
        indices = iter(sampler)
        while len(batches) < steps and (batch := list(islice(indices, batch_size))):
            batches.append(batch)
            step[0] += 1
    return batches


def test_every_batch_holds_the_configured_fraction_and_epochs_cover_the_labelled_examples():
    for proportion, batch_size in [(0.5, 16), (0.3, 10), (0.25, 12)]:
        per_batch = round(proportion * batch_size)
        batches = draw(batch_size=batch_size, per_batch=per_batch, steps=200)
        fractions = [sum(i >= 100 for i in b) / batch_size for b in batches]
        assert abs(sum(fractions) / len(fractions) - proportion) <= 0.02
        assert max(fractions) == min(fractions)  # a fixed count per batch, not a draw
        epoch = -(-100 // (batch_size - per_batch))
        assert {i for b in batches[:epoch] for i in b if i < 100} == set(range(100))
        assert {i for b in batches for i in b if i >= 100} == set(range(100, 137))


def test_the_stream_is_the_seeds_and_a_resume_continues_it():
    full = draw(steps=60)  # 13 batches per epoch: the resumes below start mid-epoch and on an epoch's boundary
    assert full == draw(steps=60)
    assert full != draw(seed=1, steps=60)
    for start in (5, 13, 31):
        assert draw(start=start, steps=60 - start) == full[start:]


def test_ranks_draw_disjoint_shares():
    ranks = [draw(steps=7, rank=r, world=2) for r in (0, 1)]  # an epoch: 7 steps × 8 labelled × 2 ranks ≥ 100
    labelled = [{i for b in batches for i in b if i < 100} for batches in ranks]
    assert labelled[0] | labelled[1] == set(range(100))
    first_six = [{i for b in batches[:6] for i in b if i < 100} for batches in ranks]  # 96 of the first pass
    assert not first_six[0] & first_six[1] and len(first_six[0]) == len(first_six[1]) == 48
    assert all(sum(i >= 100 for i in b) == 8 for batches in ranks for b in batches)


# ---------------------------------------------------------------- data
def write_posts(path: Path, n: int) -> Path:
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"p{i}", "content": f"Today I didn't fix the qqbike{i}. It broke again.",
                                "summary": f"secretsummary{i} bike broke ."}) + "\n")
    return path


def mixed_data(tmp_path: Path, unlabelled: Unlabelled, **kwargs) -> SummarizationData:
    kwargs = dict(train=DemoCorpus(200, seed=1), split=RatioSplit(0.8, 0.1, 0.1), pretokenized=True, vocab_size=300,
                  cache_dir=str(tmp_path / "cache"), name="demo", val_sample_size=8, unlabelled=unlabelled) | kwargs
    data = SummarizationData(**kwargs)
    data.setup()
    return data


def test_a_source_declared_unlabelled_never_exposes_its_summaries(tmp_path):
    posts = write_posts(tmp_path / "posts.jsonl", 40)
    source = Unlabelled("reddit", LocalFile(str(posts), fields=Fields(article="content", summary="summary")),
                        val_size=5, pretokenized=False)  # raw posts beside pretokenized labelled data
    assert all(r.summary is None and r.id.startswith("reddit:") for r in source.records())
    data = mixed_data(tmp_path, source, unlabelled_proportion=0.25)
    assert len(data.splits["unlabelled_train"]) == 35 and len(data.splits["unlabelled_val"]) == 5
    assert all(e.reference is None and e.domain == "reddit" and e.source[:5] == ["today", "i", "did", "n't", "fix"]
               for e in data.splits["unlabelled_train"] + data.splits["unlabelled_val"])
    # the vocabulary is the labelled training split's, as without the posts; their words are copied
    assert data.vocab == mixed_data(tmp_path / "plain", None).vocab and "qqbike0" not in data.vocab.stoi
    batch = next(iter(data.train_dataloader()))
    assert batch.domains == ["demo"] * 12 + ["reddit"] * 4 and batch.has_reference.tolist() == [True] * 12 + [False] * 4
    assert all(r is None for r in batch.references[12:]) and not batch.target_mask[12:].any()
    assert all(any(w.startswith("qqbike") for w in oovs) for oovs in batch.oovs[12:])
    cached = [p.read_text(errors="replace") for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert cached and not any("secretsummary" in text for text in cached)


@pytest.mark.parametrize("part", ["val", "test"])
def test_a_part_of_the_split_as_unlabelled_articles(tmp_path, part):
    held_out = [e.id for e in mixed_data(tmp_path, None).splits[part][-2:]]  # never trained on, labelled or not
    exclude = tmp_path / "heldout.tsv"
    exclude.write_text("id\n" + "\n".join(held_out) + "\n")
    plain = mixed_data(tmp_path, None, exclude_ids=str(exclude))
    data = mixed_data(tmp_path, Unlabelled("demo_" + part, part=part, val_size=3), exclude_ids=str(exclude))
    unlabelled = data.splits["unlabelled_train"] + data.splits["unlabelled_val"]
    assert len(data.splits["unlabelled_val"]) == 3
    assert all(e.reference is None and e.domain == "demo_" + part for e in unlabelled)
    chosen_on = {e.id for e in plain.splits["val"][:8]}  # the labelled validation sample
    assert {e.id for e in unlabelled} == {e.id for e in plain.splits[part]} - set(held_out) - chosen_on
    assert [e.id for e in data.splits["train"]] == [e.id for e in plain.splits["train"]] and data.vocab == plain.vocab
    assert set(held_out) <= {e.id for e in data.splits["test"]} or part == "val"
    assert all(e.reference is not None for e in data.splits[part])  # the labelled split keeps its references


def test_excluded_ids_of_a_test_source_stay_labelled_and_untrained(tmp_path):
    """With a source per split, excluded ids stay in the test split (with their references) but never train."""
    (tmp_path / "heldout.tsv").write_text("id\ndemo-00003\n")
    data = SummarizationData(DemoCorpus(100, seed=1), DemoCorpus(20, seed=2), DemoCorpus(30, seed=3),
                             exclude_ids=str(tmp_path / "heldout.tsv"), pretokenized=True, vocab_size=300,
                             cache_dir=str(tmp_path / "cache"), val_sample_size=2,
                             unlabelled=Unlabelled("demo_test", part="test", val_size=3))
    data.setup()
    unlabelled = {e.id for e in data.splits["unlabelled_train"] + data.splits["unlabelled_val"]}
    assert "demo-00003" in {e.id for e in data.splits["test"]}
    # (demo ids restart in every source: the labelled validation sample's ids 0 and 1 are kept out too)
    assert unlabelled == {f"demo-{i:05d}" for i in range(30)} - {"demo-00003", "demo-00000", "demo-00001"}


def test_a_proportion_without_both_kinds_in_a_batch_is_named():
    source = Unlabelled("x", DemoCorpus(10))
    with pytest.raises(ValueError, match=r"data\.unlabelled_proportion=0\.01 with data\.batch_size=16 gives 0"):
        SummarizationData(DemoCorpus(10), split=RatioSplit(), unlabelled=source, unlabelled_proportion=0.01)
    with pytest.raises(ValueError, match="either a `source` or a `part`"):
        Unlabelled("x", DemoCorpus(10), part="val")


# ---------------------------------------------------------------- loss and reward
VOCAB = Vocabulary("the cat sat on a mat . dog ran".split())


class Length(Reward):
    """A reference-free reward: the summary's length in tokens."""

    name, needs_reference = "length", False

    def __call__(self, inputs: RewardInput) -> torch.Tensor:
        return inputs.hyp_lens.float()


def batches():
    """A mixed batch (rows 2 and 4 without a reference, with words of their own to copy) and its labelled rows."""
    labelled = [Example(str(i), "the cat sat on the mat . the dog ran .".split(), [ref], domain="news")
                for i, ref in enumerate([["the", "cat", "sat", "."], ["a", "dog", "ran", "on", "the", "mat", "."],
                                         ["the", "dog", "sat", "."]])]
    unlabelled = [Example(f"u{i}", f"the zorb{i} ran on the quimbey mat . a cat sat . the dog ran far .".split(), None,
                          domain="reddit") for i in range(2)]
    mixed = [labelled[0], labelled[1], unlabelled[0], labelled[2], unlabelled[1]]
    return collate(mixed, VOCAB), collate(labelled, VOCAB)


def tiny_module(reward, gamma: float, unlabelled_fraction: float = 0.0) -> SummarizationModule:
    torch.manual_seed(0)
    model = PointerGenerator(PointerGeneratorConfig(vocab_size=len(VOCAB), emb_dim=8, hidden_dim=8))
    module = SummarizationModule(model, VOCAB, optimizer=lambda p: torch.optim.Adam(p),
                                 objective=partial(objective_for, reward, gamma=Constant(gamma), rl_max_len=8),
                                 unlabelled_fraction=unlabelled_fraction)
    module.logged = {}
    module.log = lambda name, value, **kwargs: module.logged.__setitem__(name, float(value))  # outside a Trainer
    return module


def gradients(module, loss):
    params = [p for p in module.model.parameters() if p.requires_grad]
    return [torch.zeros_like(p) if g is None else g
            for p, g in zip(params, torch.autograd.grad(loss, params, allow_unused=True))]


def test_unlabelled_rows_get_gradient_from_the_rl_term_only():
    mixed, labelled = batches()
    module = tiny_module(WeightedSum({"rouge_l": RougeL(), "length": Length()}, {"rouge_l": 1.0, "length": 0.1}),
                         gamma=0.5, unlabelled_fraction=0.4)
    torch.testing.assert_close(module.model.mle_loss(mixed)["loss"], module.model.mle_loss(labelled)["loss"])
    loss = module.training_step(mixed, 0)  # γ·RL + (1 − γ)·MLE, the MLE over the labelled rows' tokens alone
    assert module.logged["train/nll"] == pytest.approx(module.model.mle_loss(labelled)["nll"].item(), abs=1e-6)
    assert loss.item() == pytest.approx(0.5 * module.logged["train/rl_loss"] + 0.5 * module.logged["train/nll"],
                                        abs=1e-6)
    # γ = 0: the mixed step's gradient is the labelled rows' MLE gradient, whatever the unlabelled rows hold
    module.objective.gamma = Constant(0.0)
    for got, expected in zip(gradients(module, module.training_step(mixed, 0)),
                             gradients(module, module.model.mle_loss(labelled)["loss"])):
        torch.testing.assert_close(got, expected)
    # γ = 1: the unlabelled rows do train, through the reward's reference-free term
    module.objective.gamma = Constant(1.0)
    torch.manual_seed(3)
    with_them = gradients(module, module.training_step(mixed, 0))
    module.reward.weights["length"] = 0.0
    torch.manual_seed(3)
    without = gradients(module, module.training_step(mixed, 0))
    assert any(not torch.allclose(a, b) for a, b in zip(with_them, without))


def test_reference_terms_weigh_twice_where_a_reference_exists_and_nothing_where_none_does():
    reward = WeightedSum({"rouge_l": RougeL(), "length": Length()}, {"rouge_l": 0.8, "length": 0.1})
    inputs = RewardInput.from_texts([["the", "cat", "sat"], ["the", "dog"]], [[["the", "cat", "sat", "."]], None],
                                    VOCAB)
    rouge, length = RougeL()(inputs)[0].item(), torch.tensor([3.0, 2.0])
    parts = reward.components(inputs)
    torch.testing.assert_close(reward.total(parts, 0.5), torch.tensor([2 * 0.8 * rouge, 0.0]) + 0.1 * length)
    torch.testing.assert_close(reward.total(parts), torch.tensor([0.8 * rouge, 0.0]) + 0.1 * length)
    torch.testing.assert_close(reward.total(parts, 0.25), torch.tensor([0.8 / 0.75 * rouge, 0.0]) + 0.1 * length)


def test_training_rescales_with_the_datas_fraction_and_validation_logs_per_source():
    mixed, labelled = batches()
    reward = WeightedSum({"rouge_l": RougeL(), "length": Length()}, {"rouge_l": 1.0, "length": 0.1})
    module = tiny_module(reward, gamma=0.5, unlabelled_fraction=0.4)
    fractions, total = [], reward.total
    reward.total = lambda parts, fraction=0.0: (fractions.append(fraction), total(parts, fraction))[1]
    module.training_step(mixed, 0)
    assert 0 <= float(module.logged["train/lead3_copy"]) <= 1  # the copy monitor
    module.logged.clear()
    module.validation_step(labelled, 0)
    unlabelled = collate([Example("u0", "the zorb ran on the mat .".split(), None, domain="reddit")], VOCAB)
    module.validation_step(unlabelled, 0, dataloader_idx=1)
    assert fractions == [0.4, 0.0, 0.0]  # the reward as defined on validation
    assert set(module.logged) == {"val/loss", "val/rouge_l", "val/reward", "val/length", "val/repeated_trigrams",
                                  "val/lead3_copy", "val/reward/reddit", "val/length/reddit",
                                  "val/repeated_trigrams/reddit", "val/lead3_copy/reddit"}


# ---------------------------------------------------------------- settings and a run
def test_rewards_that_give_unlabelled_articles_nothing_are_refused_before_training(tmp_path):
    short = ["trainer.max_steps=1", "test=false", "threads=1", *UNLABELLED]  # (were they not refused)
    with pytest.raises(SettingsError, match=r"reward rouge_l needs references, but data demo mixes unlabelled "
                                            r"articles \(coin\) into training, where it is 0"):
        run(compose_run(tmp_path, "rouge", ["reward=rouge_l", "init_from=none", *short]))
    with pytest.raises(SettingsError, match="reward=mle learns from references only"):
        run(compose_run(tmp_path, "mle", ["reward=mle", *short]))
    assert not list(tmp_path.glob("*/checkpoints"))


def test_the_mixing_configs_compose_and_instantiate():
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        for data in ("cnndm_sample_tldr", "cnndm_sample_val", "cnndm_sample_test", "cnndm_tldr", "cnndm_val",
                     "cnndm_test"):
            for experiment in ("scialom_table2", "scialom_table2_sample"):
                cfg = compose("train", overrides=[f"experiment={experiment}", f"data={data}", "reward=rouge_l",
                                                  "output_dir=/tmp/x", "cache_dir=/tmp/c"])
                assert cfg.gamma.value == 0.5 and cfg.data.unlabelled_proportion == 0.5
                data_module = instantiate(cfg.data)
                assert data_module.unlabelled_fraction == 0.5
                assert data_module.unlabelled.name in ("tldr", "cnndm_val", "cnndm_test")
        cfg = compose("train", overrides=["experiment=scialom_table2", "output_dir=/tmp/x"])
        assert cfg.reward.name == "qa_learned" and cfg.data.name == "cnndm" and cfg.trainer.accelerator == "gpu"
        cfg = compose("train", overrides=["experiment=scialom_table2_sample", "data=cnndm_sample_tldr",
                                          "reward=qa_learned", "output_dir=/tmp/x"])
        assert cfg.data.unlabelled.source.path.endswith("tldr_reddit_tifu_sample.jsonl")
        assert (cfg.model.config.hidden_dim, cfg.data.vocab_size) == (128, 20000)  # cnndm_sample_grid's model


@pytest.mark.slow
def test_a_two_step_mixed_run_with_the_learned_qa_metric(tmp_path, tiny_qa_model):
    model = [f"reward.terms.{term}.qa.model={tiny_qa_model}" for term in ("qa_conf", "qa_fscore")]
    run(compose_run(tmp_path, "mixed", ["reward=qa_learned", *model, "init_from=none", "trainer.max_steps=2",
                                        "trainer.val_check_interval=2", "test=false", "threads=1", *UNLABELLED]))
    steps = logged(tmp_path / "mixed", "train/loss")
    assert len(steps) == 2 and torch.isfinite(torch.tensor(steps)).all()
    for key in ("val/loss", "val/rouge_l", "val/reward", "val/reward/coin", "val/length/coin"):
        assert len(logged(tmp_path / "mixed", key)) == 2, key  # before the first step and after the second
    assert not logged(tmp_path / "mixed", "val/rouge_l/coin")


@pytest.mark.slow
def test_a_resumed_mixed_run_continues_the_same_stream(tmp_path, tiny_qa_model):
    """Resumed mid-epoch (7 batches per epoch here), a run draws the batches, and takes the losses, of an
    uninterrupted one, across the epoch's end: the stream is a function of the checkpoint's global step."""
    model = [f"reward.terms.{term}.qa.model={tiny_qa_model}" for term in ("qa_conf", "qa_fscore")]
    common = ["reward=qa_learned", *model, "init_from=none", "trainer.val_check_interval=5", "test=false", "threads=1",
              "data.train.n=60", "data.max_target_len=20", *UNLABELLED]
    run(compose_run(tmp_path, "whole", [*common, "trainer.max_steps=9"]))
    run(compose_run(tmp_path, "resumed", [*common, "trainer.max_steps=4"]))
    last = tmp_path / "resumed" / "checkpoints" / "last.ckpt"
    run(compose_run(tmp_path, "resumed", [*common, "trainer.max_steps=9", f"ckpt_path={last}"]))
    whole, resumed = (losses(tmp_path / name) for name in ("whole", "resumed"))
    assert sorted(resumed) == list(range(9))
    assert resumed == pytest.approx(whole, abs=1e-5)
