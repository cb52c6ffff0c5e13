"""Self-critical training: the loss sign and masking, the no-grad baseline, and the mixed step."""
import json
from functools import partial

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from models.decoding import BlockRepeatedTrigrams, MinLength, rollout_rows, sample_and_greedy
from models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from models.text.batch import Example, collate
from models.text.vocab import Vocabulary
from rewards.base import Display, Reward, RewardInput
from rewards.length import LengthOnly
from models.text.ngrams import repeated_ngram_counts
from rewards.repeats import RepeatPenalty
from rewards.rouge import RougeL
from trainer.rl import GreedyBaseline, LeaveOneOut
from trainer.evaluate import table_record
from trainer.module import SummarizationModule
from trainer.objectives import decoder_inputs, objective_for
from trainer.rl import self_critical_loss
from trainer.schedules import Constant


def test_self_critical_loss_sign_and_eos_mask():
    log_probs = torch.full((2, 4), -1.0, requires_grad=True)
    lengths = torch.tensor([2, 3])  # row 0 ended with </s> at step 1 (counted), row 1 at step 2
    sample_reward, baseline = torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.5])
    loss = self_critical_loss(log_probs, lengths, sample_reward - baseline)
    # −(r(ŷ) − r(ỹ))·Σ_t log p(ŷ_t): by hand, −0.5·(−2) and +0.5·(−3)
    assert torch.allclose(loss, torch.tensor([1.0, -1.5]))
    loss.sum().backward()
    # A sample that beats its baseline gets its log-probability pushed up (negative gradient:
    # descent raises it); one that loses gets pushed down; steps after </s> get no gradient.
    assert torch.equal(log_probs.grad, torch.tensor([[-0.5, -0.5, 0.0, 0.0], [0.5, 0.5, 0.5, 0.0]]))


def test_self_critical_loss_length_normalisation():
    log_probs = torch.full((1, 4), -2.0)
    loss = self_critical_loss(log_probs, torch.tensor([4]), torch.tensor([1.0]), length_normalize=True)
    assert torch.allclose(loss, torch.tensor([2.0]))


def tiny_module(reward=RougeL(), gamma=0.5):
    vocab = Vocabulary("the cat sat on a mat . dog ran".split())
    examples = [Example(str(i), "the cat sat on the mat . the dog ran .".split(),
                        [["the", "cat", "sat", "."]] if i % 3 else None) for i in range(6)]
    batch = collate(examples, vocab)
    torch.manual_seed(0)
    model = PointerGenerator(PointerGeneratorConfig(vocab_size=len(vocab), emb_dim=8, hidden_dim=8))
    module = SummarizationModule(model, vocab, optimizer=lambda p: torch.optim.Adam(p),
                                 objective=partial(objective_for, reward, gamma=Constant(gamma), rl_max_len=8))
    module.log = lambda *a, **k: None  # outside a Trainer
    return module, batch


def test_baseline_and_sample_decodes_run_without_gradient():
    module, batch = tiny_module()
    grad_modes = []
    step = module.model.step_probs
    module.model.step_probs = lambda *a, **k: (grad_modes.append(torch.is_grad_enabled()), step(*a, **k))[1]
    loss = module.training_step(batch, 0)
    assert grad_modes and not any(grad_modes)
    loss.backward()
    grads = [p.grad for p in module.model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert module.model.training  # the decode's eval mode was switched back


def test_rollout_processors_rule_the_samples_and_the_greedy_baseline():
    """`rl.processors` (here the test's trigram blocking) apply to every training decode: on a vocabulary this small,
    unblocked rollouts of 8 tokens repeat trigrams; blocked ones never do."""
    def rollout_repeats(processors):
        module, batch = tiny_module()
        module.objective.samples, module.objective.processors = 3, processors
        torch.manual_seed(1)
        decoded = module.objective.rollouts(module.model, module.vocab, batch, module.model.encode(batch)).decoded
        repeats, _ = repeated_ngram_counts(decoded.ids, decoded.lengths, len(module.vocab) + batch.n_copy_oovs)
        return int(repeats.sum())
    assert rollout_repeats([]) > 0
    assert rollout_repeats([BlockRepeatedTrigrams()]) == 0


def test_examples_without_reference_get_no_reward_based_gradient():
    # γ = 1: only the RL term; with every reference removed a reference-based reward gives zero advantage.
    module, batch = tiny_module(gamma=1.0)
    batch.has_reference[:] = False
    batch.target_mask[:] = False
    loss = module.training_step(batch, 0)
    assert loss.item() == 0.0


def test_baselines_by_hand():
    rewards = torch.tensor([[1.0, 2.0, 3.0, 6.0], [0.0, 0.0, 4.0, 0.0]])
    # leave-one-out: the mean of the other three samples of the same article
    expected = torch.tensor([[11 / 3, 10 / 3, 3.0, 2.0], [4 / 3, 4 / 3, 0.0, 4 / 3]])
    torch.testing.assert_close(LeaveOneOut(4)(rewards, None), expected)
    torch.testing.assert_close(GreedyBaseline()(rewards, torch.tensor([0.5, 2.0])),
                               torch.tensor([[0.5] * 4, [2.0] * 4]))


def replayed_loss(module, batch, seed, k, baseline, temperature=1.0):
    """The mixed loss recomputed outside the module from the same draws (same seed): decode at the temperature,
    reward each row, baseline by hand, then γ·mean_i mean_j −(r_ij − b_ij)·Σ_t log q(ŷ_ij,t) + (1 − γ)·MLE,
    q the tempered distribution (test_decoding checks `teacher_forced` at a temperature against the
    decoder's steps)."""
    B, model = len(batch), module.model
    torch.manual_seed(seed)
    enc = model.encode(batch)
    model.eval()
    decoded = sample_and_greedy(model, enc, module.objective.rl_max_len, samples=k,
                                with_greedy=baseline == "greedy", temperature=temperature)
    model.train()
    rows = rollout_rows(B, k, baseline == "greedy")
    rollouts = batch.index_select(rows)
    rewards = module.reward(RewardInput.from_decoded(decoded.ids, decoded.lengths, rollouts, module.vocab))
    rewards = torch.where(rollouts.has_reference, rewards, 0.0)
    terms = []
    for i in range(B):
        samples = [rewards[i * k + j].item() for j in range(k)]
        for j in range(k):
            if baseline == "greedy":
                b = rewards[B * k + i].item()
            else:
                b = (sum(samples) - samples[j]) / (k - 1)
            row = decoded.select(slice(i * k + j, i * k + j + 1))
            one = batch.index_select([i])
            log_q = model.teacher_forced(model.encode(one), decoder_inputs(row.ids, module.vocab), row.ids,
                                         temperature).log_probs
            terms.append(-(samples[j] - b) * log_q[0, : row.lengths[0]].sum())
    rl = torch.stack(terms).mean()
    gamma = module.objective.gamma(0)
    return gamma * rl + (1 - gamma) * model.mle_loss(batch)["loss"]


@pytest.mark.parametrize("k, baseline, temperature", [(1, "greedy", 1.0), (3, "greedy", 1.0),
                                                      (3, "leave_one_out", 1.0), (2, "greedy", 0.5)])
def test_mixed_loss_with_k_samples_matches_the_replayed_formula(k, baseline, temperature):
    module, batch = tiny_module(gamma=0.7)
    module.objective.samples, module.objective.temperature = k, temperature
    module.objective.baseline = GreedyBaseline() if baseline == "greedy" else LeaveOneOut(k)
    torch.manual_seed(11)
    loss = module.training_step(batch, 0)
    expected = replayed_loss(module, batch, 11, k, baseline, temperature)
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)


def test_k1_greedy_equals_the_self_critical_loss():
    # today's loss: one sample and its greedy baseline per article, self_critical_loss on the decode's halves
    module, batch = tiny_module(gamma=0.7)
    B = len(batch)
    torch.manual_seed(5)
    loss = module.training_step(batch, 0)
    torch.manual_seed(5)
    enc = module.model.encode(batch)
    module.model.eval()
    both = sample_and_greedy(module.model, enc, module.objective.rl_max_len)
    module.model.train()
    s, g = both.select(slice(0, B)), both.select(slice(B, None))
    reward = lambda d: torch.where(batch.has_reference,  # noqa: E731
                                   module.reward(RewardInput.from_decoded(d.ids, d.lengths, batch, module.vocab)), 0.0)
    log_p = module.model.teacher_forced(enc, decoder_inputs(s.ids, module.vocab), s.ids).log_probs
    rl = self_critical_loss(log_p, s.lengths, reward(s) - reward(g))
    expected = 0.7 * rl.mean() + 0.3 * module.model.mle_loss(batch, enc=enc)["loss"]
    torch.testing.assert_close(loss, expected, atol=1e-6, rtol=1e-6)


def test_the_length_only_reward_pays_tokens_up_to_its_cap():
    reward = LengthOnly(max_tokens=4)
    inputs = RewardInput(torch.zeros(3, 6, dtype=torch.long), torch.tensor([1, 3, 6]), batch=None, vocab=None)
    assert reward(inputs).tolist() == [0.25, 0.75, 1.0]
    assert reward.control and not reward.needs_reference and table_record(reward, {})["control"]
    assert table_record(RougeL(), {}, length_neutral=1.0)["row"] == "Mixed w/ ROUGE-L, length-neutral 1"
    with pytest.raises(ValueError, match="reward.max_tokens must be a positive"):
        LengthOnly(max_tokens=0)


def test_a_length_neutral_objective_leaves_a_reward_of_length_alone_nothing_to_pay():
    """Below its cap the length-only reward is linear in the samples' length: with rl.length_neutral=1 every
    advantage is the batch's intercept, the same for every sample, however long it runs."""
    module, batch = tiny_module(reward=LengthOnly(max_tokens=100))
    module.objective.length_neutral, module.objective.samples = 1.0, 3
    torch.manual_seed(3)
    out = module.objective.rollouts(module.model, module.vocab, batch, module.model.encode(batch))
    plain = out.sample_rewards - out.baseline
    assert plain.std() > 0  # the samples' lengths differ, so would their advantages
    torch.testing.assert_close(out.advantage, torch.full_like(out.advantage, float(out.advantage.mean())))
    with pytest.raises(ValueError, match=r"rl.length_neutral must be in \[0, 1\]"):
        tiny_module()[0].objective.__class__(RougeL(), length_neutral=1.5)


class NaNWithoutReference(Reward):
    """A reference-based reward that, like a careless metric, returns NaN where there is no reference."""

    name, needs_reference = "nan_without_reference", True

    def __call__(self, inputs: RewardInput) -> torch.Tensor:
        scores = RougeL()(inputs)
        return torch.where(inputs.has_reference, scores, torch.nan)


def test_rows_without_reference_get_zero_reward_even_when_it_is_nan():
    module, batch = tiny_module(reward=NaNWithoutReference(), gamma=1.0)
    assert not batch.has_reference.all() and batch.has_reference.any()
    torch.manual_seed(3)
    loss = module.training_step(batch, 0)
    assert torch.isfinite(loss)
    module.objective.reward = RougeL()
    torch.manual_seed(3)
    torch.testing.assert_close(loss, module.training_step(batch, 0))


class NaNOnFirstArticle(Reward):
    """A reference-free reward that does not apply to article "0" (NaN there)."""

    name, needs_reference = "nan_on_first", False

    def __call__(self, inputs: RewardInput) -> torch.Tensor:
        scores = RougeL()(inputs)
        return torch.where(torch.tensor([i == "0" for i in inputs.batch.ids]), torch.nan, scores)


def test_rows_a_reward_does_not_apply_to_get_zero_and_are_counted():
    module, batch = tiny_module(reward=NaNOnFirstArticle(), gamma=1.0)
    logged = {}
    module.log = lambda name, value, **kwargs: logged.__setitem__(name, float(value))
    loss = module.training_step(batch, 0)
    assert torch.isfinite(loss) and logged["train/reward_not_applicable"] == pytest.approx(1 / 6)


def test_batch_index_select_repeats_rows_and_lists():
    _, batch = tiny_module()
    picked = batch.index_select([2, 2, 0])
    assert picked.ids == ["2", "2", "0"] and picked.references[0] == batch.references[2]
    assert torch.equal(picked.ref[1], batch.ref[2]) and torch.equal(picked.src_ext[2], batch.src_ext[0])
    assert picked.n_copy_oovs == batch.n_copy_oovs and len(picked) == 3


class Ones(Reward):
    name, needs_reference = "ones", False

    def __call__(self, inputs: RewardInput) -> torch.Tensor:
        return torch.ones(len(inputs.hyp_lens))


def test_penalized_repeats_scale_the_reward_by_the_share_of_new_trigrams():
    module, batch = tiny_module(reward=Ones())
    v = module.vocab
    rows = [v.ids("the cat sat the cat sat".split()) + [v.eos_id],  # trigrams: 4, one a repeat -> 3/4
            v.ids("the cat sat on a mat".split()) + [v.eos_id],     # no repeat -> 1
            v.ids("the the the the".split()) + [v.eos_id, v.pad_id, v.pad_id]]  # 2 trigrams, 1 repeat -> 1/2
    ids = torch.tensor(rows)
    inputs = RewardInput.from_decoded(ids, torch.tensor([7, 7, 5]), batch.index_select([0, 1, 2]), v)
    assert module.objective.scores(inputs)[0].tolist() == [1.0, 1.0, 1.0]
    module.objective.reward = RepeatPenalty(module.reward)
    assert module.objective.scores(inputs)[0].tolist() == [0.75, 1.0, 0.5]


class InfOnArticle(Reward):
    """A broken reward: +inf on every row of article `bad` (a non-finite loss follows), ROUGE-L elsewhere."""

    name, needs_reference = "inf_on_article", True

    def __init__(self, bad: str):
        self.bad = bad

    def __call__(self, inputs: RewardInput) -> torch.Tensor:
        scores = RougeL()(inputs)
        bad = torch.tensor([i == self.bad for i in inputs.batch.ids])
        return torch.where(bad, torch.inf, scores)


def test_non_finite_loss_skips_the_step_with_the_ids_and_stops_after_k(caplog):
    module, batch = tiny_module(reward=InfOnArticle(bad="1"), gamma=1.0)
    module.max_nonfinite_steps = 2
    assert module.training_step(batch, 0) is None
    assert "optimizer step skipped; articles ['0', '1', '2', '3', '4', '5']" in caplog.text
    with pytest.raises(FloatingPointError, match="2 non-finite losses in a row.*no checkpoint was written yet"):
        module.training_step(batch, 1)


def test_a_finite_step_resets_the_non_finite_count():
    module, batch = tiny_module(reward=InfOnArticle(bad="1"), gamma=1.0)
    module.max_nonfinite_steps = 2
    assert module.training_step(batch, 0) is None
    module.reward.bad = "none"
    assert torch.isfinite(module.training_step(batch, 1))
    module.reward.bad = "1"
    assert module.training_step(batch, 2) is None  # one in a row again, not two


def test_a_skipped_step_leaves_the_weights_and_still_counts():
    module, batch = tiny_module(reward=InfOnArticle(bad="1"), gamma=1.0)
    del module.log  # inside a Trainer now
    before = [p.detach().clone() for p in module.model.parameters()]
    # every step skipped, fewer than max_nonfinite_steps: the fit ends refusing to pass the start off as trained
    with pytest.raises(FloatingPointError, match="all 2 training steps had a non-finite loss and were skipped"):
        pl.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False, limit_val_batches=0).fit(
            module, train_dataloaders=DataLoader([batch, batch], batch_size=None, collate_fn=lambda b: b))
    assert all(torch.equal(a, b) for a, b in zip(before, module.model.parameters()))
    # Lightning still counts a skipped step, so the step count stays the count of batches drawn, which is
    # where trainer.data.ResumableShuffle resumes from.
    assert module.trainer.global_step == 2


# ---------------------------------------------------------------- validation by the test's decoder and metric

def validation_values(module, batch):
    logged = {}
    module.log = lambda key, value, **kwargs: logged.__setitem__(key, float(value))
    module.validation_step(batch, 0)
    return logged


def test_test_metric_validation_scores_the_beam_decodes_with_the_test_metric_unpenalised():
    """`select_by=test_metric`: validation beam-decodes with the test's settings and logs the mean of rouge-score's
    ROUGE-L F ×100 of those summaries, recomputed here from the same beam decodes, without the repeat penalty."""
    from rouge_score import rouge_scorer

    from models.decoding import beam_search

    module, batch = tiny_module()
    module.select_by, module.objective.reward = "test_metric", RepeatPenalty(module.reward)
    module.beam = {"beam_size": 3, "max_len": 8}
    labelled = batch.index_select([i for i in range(len(batch)) if batch.has_reference[i]])
    with torch.no_grad():
        module.model.eval()
        logged = validation_values(module, labelled)
        decoded = beam_search(module.model, module.model.encode(labelled), beam_size=3, max_len=8)
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    expected = []
    for i, (ids, n) in enumerate(zip(decoded.ids.tolist(), decoded.lengths.tolist())):
        summary = " ".join(t for t in module.vocab.decode(ids[:n], labelled.oovs[i]))
        expected.append(100 * scorer.score("the cat sat .", summary)["rougeL"].fmeasure)
    assert logged["val/test_metric"] == pytest.approx(sum(expected) / len(expected), abs=1e-5)
    assert "val/reward" in logged  # the penalised greedy reward stays logged beside it


def test_test_metric_validation_is_the_rewards_own_metric_for_a_mover_reward():
    """A reward without a `test_metric` (the mover's similarities) is its own test metric, at its display scale."""
    class Length(Reward):
        name, needs_reference = "length", True
        display = Display("Length", 1000)  # scored ×1000, as the mover's metrics are

        def __call__(self, inputs):
            return inputs.hyp_lens.float() / 100

    module, batch = tiny_module(reward=Length())
    module.select_by, module.beam = "test_metric", {"beam_size": 2, "max_len": 6, "processors": [MinLength(5)]}
    labelled = batch.index_select([i for i in range(len(batch)) if batch.has_reference[i]])
    with torch.no_grad():
        module.model.eval()
        logged = validation_values(module, labelled)
    # min_len 5 of max_len 6: every summary has 5 or 6 tokens, so 50 to 60 at ×1000 / 100
    assert 50 <= logged["val/test_metric"] <= 60


def test_the_test_scores_a_mixed_runs_own_metric_unpenalised_even_when_it_reads_the_article(tmp_path):
    """A reward that reads the article (LS-Score, the unsupervised QA metrics) can only be scored at test time, when
    the article is at hand: its diagonal cell must not depend on the user listing it under `metrics`."""
    class Length(Reward):
        name, needs_reference = "length", False
        display = Display("Length", 1000, reads_article=True)

        def __call__(self, inputs):
            return inputs.hyp_lens.float() / 100

    module, batch = tiny_module(reward=RepeatPenalty(Length()))
    module.output_dir, module.beam = tmp_path, {"beam_size": 2, "max_len": 6, "processors": [MinLength(5)]}
    module.on_test_epoch_start()
    with torch.no_grad():
        module.model.eval()
        module.test_step(batch, 0)
    module.on_test_epoch_end()
    rows = [json.loads(line) for line in (tmp_path / "summaries.jsonl").read_text().splitlines()]
    assert len(rows) == 4  # the articles with a reference
    for row in rows:  # tokens / 100 at ×1000, without the repeat penalty (the untrained model repeats itself)
        assert row["scores"]["length"] == pytest.approx(len(row["summary"].split()) * 10)
    # and table4 is told to take it from there (it cannot score it without the article)
    assert table_record(module.reward, module.metrics_at_test)["stored"] == ["length"]


def test_select_by_is_checked():
    vocab = Vocabulary("a b".split())
    model = PointerGenerator(PointerGeneratorConfig(vocab_size=len(vocab), emb_dim=4, hidden_dim=4))
    with pytest.raises(ValueError, match="select_by must be one of"):
        SummarizationModule(model, vocab, optimizer=torch.optim.Adam, select_by="beam")


class TokensPerTen(Reward):
    name, needs_reference = "tokens", False

    def __call__(self, inputs):
        return inputs.hyp_lens.float() / 10


def test_the_repeat_penalty_keeps_the_unpenalised_reward_beside_the_penalised_one():
    inputs = RewardInput.from_texts([["a", "b", "c", "a", "b", "c"], ["a", "b", "c"]], [None, None],
                                    Vocabulary("a b c".split()))
    penalty = RepeatPenalty(TokensPerTen())
    # trigrams abc bca cab abc: 1 of 4 repeats -> 0.6 × 3/4; abc alone: 0.3
    torch.testing.assert_close(penalty(inputs), torch.tensor([0.45, 0.3]))
    torch.testing.assert_close(penalty.term_values()["unpenalized"], torch.tensor([0.6, 0.3]))


def test_the_test_scores_the_listed_metrics_in_their_order_and_the_test_metric_once():
    """`metrics_at_test`: the listed metrics in their order (the columns a run prints), a test metric already listed taking
    its listed entry and place, another one after them; ROUGE-L's test metric is the test's own ROUGE-L."""
    class Named(Reward):
        needs_reference = True

        def __init__(self, name):
            self.name = name

        def __call__(self, inputs):
            return inputs.hyp_lens.float()

    listed = {key: Named(key) for key in ("wms", "sms", "s_wms")}
    for reward, keys in ((Named("sms"), ["wms", "sms", "s_wms"]), (Named("len"), ["wms", "sms", "s_wms", "len"]),
                         (RougeL(), ["wms", "sms", "s_wms", "rougeL"])):
        module, _ = tiny_module(reward=reward)
        module.metrics = dict(listed)
        assert list(module.metrics_at_test) == keys
        assert module.metrics_at_test["sms"] is listed["sms"]
    assert type(module.metrics_at_test["rougeL"]).__name__ == "RougeScore"
