import itertools
import json
import random
from dataclasses import fields, replace
from pathlib import Path

import pytest
import torch
from rouge_score import rouge_scorer

from models.decoding import (BlockRepeatedTrigrams, Decoded, MinLength, _multinomial, beam_search, check_beam_settings,
                             greedy, rollout_rows, sample_and_greedy, sample_categorical)
from models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from models.text.batch import Batch, Example, collate
from models.text.vocab import Vocabulary

NAMES = "zorblax quimbey fennick glorbo trastel vumble plonkett sizzard brindle koffa snerdle wopple".split()
VERBS = "visited painted sold found built cleaned bought opened".split()
NOUNS = "house boat garden bridge school market library tower".split()
PLACES = "london paris the-village the-city madrid berlin".split()
DAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
ADJS = "old new big small quiet busy green famous".split()


def toy_corpus(n: int = 64, seed: int = 0) -> list[Example]:
    """News-like articles: filler sentences plus one sentence about a rare name (outside the vocabulary);
    the summary is that sentence, so writing it needs copying."""
    rng = random.Random(seed)
    examples = []
    for k in range(n):
        news = [rng.choice(NAMES), rng.choice(VERBS), "the", rng.choice(NOUNS), "in", rng.choice(PLACES),
                "on", rng.choice(DAYS), "."]
        filler = [["the", rng.choice(NOUNS), "was", rng.choice(ADJS), "and", rng.choice(ADJS), "."]
                  for _ in range(rng.randint(1, 3))]
        sentences = filler + [news]
        rng.shuffle(sentences)
        examples.append(Example(f"toy-{k}", [t for s in sentences for t in s], [news]))
    return examples


def toy_vocab() -> Vocabulary:
    return Vocabulary(VERBS + NOUNS + PLACES + DAYS + ADJS + "the in on was and .".split())  # no names


class WhitespaceTokenizer:
    def tokenize(self, text: str) -> list[str]:
        return text.split()


def train(model: PointerGenerator, batches, steps: int, lr: float = 1e-2) -> None:
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for step in range(steps):
        loss = model.mle_loss(batches[step % len(batches)])["loss"]
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        optimizer.step()
    model.eval()


@pytest.fixture(scope="module")
def toy():
    """A small pointer-generator trained on the toy corpus, plus a snapshot from early in training."""
    torch.manual_seed(0)
    vocab, examples = toy_vocab(), toy_corpus()
    batches = [collate(examples[i:i + 16], vocab) for i in range(0, len(examples), 16)]
    model = PointerGenerator(PointerGeneratorConfig(vocab_size=len(vocab), emb_dim=32, hidden_dim=64))
    train(model, batches, 15)
    early = PointerGenerator(model.config)
    early.load_state_dict(model.state_dict())
    train(model, batches, 60)
    return vocab, examples, batches, early.eval(), model


@pytest.fixture
def untrained():
    torch.manual_seed(0)
    vocab, examples = toy_vocab(), toy_corpus(8, seed=1)
    model = PointerGenerator(PointerGeneratorConfig(vocab_size=len(vocab), emb_dim=16, hidden_dim=24)).eval()
    return model, collate(examples, vocab)


def token_log_probs(model: PointerGenerator, enc, out: Decoded) -> torch.Tensor:
    """Each decoded token's log-probability under the model [B, T], 0 after </s>: the decode, teacher-forced."""
    feed = torch.cat([torch.full_like(out.ids[:, :1], model.config.bos_id), out.ids[:, :-1]], 1)
    with torch.no_grad():
        return model.teacher_forced(enc, feed, out.ids).log_probs


def normalised_scores(model: PointerGenerator, enc, out: Decoded, length_penalty: float = 1.0) -> torch.Tensor:
    return token_log_probs(model, enc, out).sum(1) / out.lengths.float() ** length_penalty


def assert_well_formed(model: PointerGenerator, batch, out: Decoded, max_len: int) -> None:
    """Masked after the first </s> (kept), and lengths count it."""
    eos, pad = model.config.eos_id, model.config.pad_id
    assert out.ids.shape == (len(batch), out.ids.size(1)) and out.ids.size(1) <= max_len
    for ids, length in zip(out.ids.tolist(), out.lengths.tolist()):
        first_eos = ids.index(eos) + 1 if eos in ids else None
        assert length == (first_eos or max_len)
        assert pad not in ids[:length]
        assert all(i == pad for i in ids[length:])


def assert_beam_of_width_one_is_greedy(model: PointerGenerator, batch) -> None:
    with torch.no_grad():
        g = greedy(model, model.encode(batch), max_len=12)
    b = beam_search(model, model.encode(batch), beam_size=1, max_len=12, length_penalty=0.0)
    assert torch.equal(b.ids, g.ids) and torch.equal(b.lengths, g.lengths)


def test_beam_of_width_one_is_greedy(untrained, toy):
    assert_beam_of_width_one_is_greedy(*untrained)
    _, _, batches, early, model = toy
    for m in (early, model):
        assert_beam_of_width_one_is_greedy(m, batches[0])


class MarkovChain(PointerGenerator):
    """A stand-in model whose next-token log-probs depend only on the previous token (rows of `table`),
    so that decoders can be checked against exhaustive search."""

    def __init__(self, table: torch.Tensor):
        super().__init__(PointerGeneratorConfig(vocab_size=table.size(0), emb_dim=4, hidden_dim=4))
        self.table = table

    def step_probs(self, enc, state, input_ids):
        return self.table[input_ids].exp(), state, None

    def step(self, enc, state, input_ids):
        return self.table[input_ids], state, None


def markov_chain(seed: int, words: int = 3) -> MarkovChain:
    """Transitions among </s> and `words` words (ids 4, 5, ...); <pad>, <unk>, <s> are never produced."""
    V = 4 + words
    logits = torch.randn(V, V, generator=torch.Generator().manual_seed(seed)) * 2
    logits[:, :3] = float("-inf")
    return MarkovChain(torch.log_softmax(logits, -1))


def markov_batch() -> Batch:
    vocab = Vocabulary(["a", "b", "c"])  # ids 4, 5, 6 as in `markov_chain`
    return collate([Example("x", ["a", "b"], None), Example("y", ["c"], None)], vocab)


def exhaustive_best(model: MarkovChain, max_len: int, min_len: int, length_penalty: float) -> tuple[list[int], float]:
    """The finished sequence (ending in </s>, at least min_len tokens before it) with the best normalised score."""
    eos, bos = model.config.eos_id, model.config.bos_id
    best, best_score = None, float("-inf")
    for n in range(min_len, max_len):
        for words in itertools.product(range(4, model.table.size(0)), repeat=n):
            seq = list(words) + [eos]
            score = sum(model.table[prev, tok].item() for prev, tok in zip([bos] + seq[:-1], seq))
            if score / len(seq) ** length_penalty > best_score:
                best, best_score = seq, score / len(seq) ** length_penalty
    return best, best_score


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_wide_beam_finds_the_exhaustive_optimum(length_penalty):
    batch = markov_batch()
    for seed in range(5):
        model = markov_chain(seed)
        best, best_score = exhaustive_best(model, max_len=5, min_len=1, length_penalty=length_penalty)
        out = beam_search(model, model.encode(batch), beam_size=100, max_len=5,
                          length_penalty=length_penalty, processors=[MinLength(1)])
        for ids, n in zip(out.ids.tolist(), out.lengths.tolist()):
            assert ids[:n] == best
            previous = [model.config.bos_id] + ids[:n - 1]
            score = sum(model.table[prev, tok].item() for prev, tok in zip(previous, ids[:n]))
            assert score / n ** length_penalty == pytest.approx(best_score, abs=1e-5)


def test_beam_of_width_one_follows_greedy_past_a_runner_up_eos():
    batch = markov_batch()
    for seed in range(20):
        assert_beam_of_width_one_is_greedy(markov_chain(seed), batch)


@pytest.mark.parametrize("settings, message", [
    ({"beam_size": 0}, r"beam_size must be at least 1, got 0"),
    ({"beam_size": -2}, r"beam_size must be at least 1, got -2"),
    ({"max_len": 0, "processors": [MinLength(0)]}, r"max_len must be at least 1, got 0"),
    ({"max_len": 10, "processors": [MinLength(10)]}, r"min_len must be at least 0 and below max_len \(10\), got 10"),
    ({"processors": [MinLength(-1)]}, r"min_len must be at least 0 and below max_len \(100\), got -1"),
])
def test_beam_settings_that_would_fail_at_test_time_are_named(settings, message):
    with pytest.raises(ValueError, match=message):
        check_beam_settings(**settings)


def test_beam_settings_that_decode_pass_and_unknown_names_are_refused():
    check_beam_settings(beam_size=5, max_len=60, length_penalty=1.0,
                        processors=[MinLength(59), BlockRepeatedTrigrams()])
    check_beam_settings()  # beam_search's defaults
    with pytest.raises(TypeError, match="beam_sise"):
        check_beam_settings(beam_sise=5)


def test_untrained_decodes_run_to_max_len_and_are_masked(untrained):
    model, batch = untrained
    with torch.no_grad():
        enc = model.encode(batch)
        outs = [greedy(model, enc, max_len=7),
                sample_and_greedy(model, enc, 7, generator=torch.Generator().manual_seed(0), with_greedy=False),
                sample_and_greedy(model, enc, 7, generator=torch.Generator().manual_seed(0), samples=3)]
    outs.append(beam_search(model, enc, beam_size=3, max_len=7, processors=[MinLength(2)]))
    for out in outs:
        assert_well_formed(model, batch.index_select(rollout_rows(len(batch), 3, True)) if len(out.lengths) > len(batch)
                           else batch, out, max_len=7)


def test_trained_decodes_stop_at_eos_and_are_masked(toy):
    vocab, _, batches, _, model = toy
    batch = batches[0]
    with torch.no_grad():
        enc = model.encode(batch)
        g = greedy(model, enc, max_len=30)
        both = sample_and_greedy(model, enc, 30, generator=torch.Generator().manual_seed(0))
        s, sg = both.select(slice(0, len(batch))), both.select(slice(len(batch), None))
    b = beam_search(model, enc, beam_size=4, max_len=30)
    long = beam_search(model, enc, beam_size=4, max_len=30, processors=[MinLength(12)])  # longer than the references
    for out in (g, s, sg, b, long):
        assert_well_formed(model, batch, out, max_len=30)
        assert (out.lengths < 30).all()  # the trained model ends its summaries
    assert (b.lengths <= 10).all() and (long.lengths >= 13).all() and (long.lengths == 13).any()


def test_sampling_is_reproducible(untrained):
    model, batch = untrained
    enc = model.encode(batch)
    a, b, c = (sample_and_greedy(model, enc, 10, generator=torch.Generator().manual_seed(seed), with_greedy=False)
               for seed in (3, 3, 4))
    assert torch.equal(a.ids, b.ids) and not torch.equal(a.ids, c.ids)


def test_sample_and_greedy_halves(untrained):
    model, batch = untrained
    gen = torch.Generator().manual_seed(5)
    enc = model.encode(batch)
    both = sample_and_greedy(model, enc, 10, generator=gen)
    s, g = both.select(slice(0, len(batch))), both.select(slice(len(batch), None))
    with torch.no_grad():
        reference = greedy(model, enc, 10)
    assert torch.equal(g.ids, reference.ids) and torch.equal(g.lengths, reference.lengths)
    assert len(s.lengths) == len(batch)
    assert not torch.equal(s.ids, g.ids)  # an untrained model's samples are not its argmax


def test_trigram_blocking(untrained):
    model, batch = untrained

    def repeats(ids: list[int]) -> bool:
        trigrams = [tuple(ids[i:i + 3]) for i in range(len(ids) - 2)]
        return len(trigrams) != len(set(trigrams))

    enc = model.encode(batch)
    plain = beam_search(model, enc, beam_size=3, max_len=15, processors=[MinLength(15)])
    blocked = beam_search(model, enc, beam_size=3, max_len=15, processors=[MinLength(15), BlockRepeatedTrigrams()])
    assert any(repeats(ids) for ids in plain.ids.tolist())  # the untrained model does repeat itself
    assert not any(repeats(ids[:n]) for ids, n in zip(blocked.ids.tolist(), blocked.lengths.tolist()))


def test_beam_beats_greedy_on_length_normalised_score(toy):
    _, _, batches, early, _ = toy
    beam_scores, greedy_scores = [], []
    for batch in batches:
        with torch.no_grad():
            enc = early.encode(batch)
            greedy_scores.append(normalised_scores(early, enc, greedy(early, enc, max_len=30)))
        beam_scores.append(normalised_scores(early, enc, beam_search(early, enc, beam_size=4, max_len=30)))
    beam_scores, greedy_scores = torch.cat(beam_scores), torch.cat(greedy_scores)
    assert (beam_scores >= greedy_scores - 1e-4).float().mean() >= 0.9
    assert beam_scores.mean() > greedy_scores.mean() + 1e-3


@pytest.mark.slow
def test_overfits_toy_corpus_and_copies_oov_names(toy):
    vocab, examples, batches, _, model = toy
    scorer = rouge_scorer.RougeScorer(["rougeL"], tokenizer=WhitespaceTokenizer())
    f_scores, copied = [], set()
    for start, batch in zip(range(0, len(examples), 16), batches):
        with torch.no_grad():
            out = greedy(model, model.encode(batch), max_len=30)
        for ex, ids, oovs in zip(examples[start:start + 16], out.ids.tolist(), batch.oovs):
            tokens = vocab.decode(ids, oovs)
            reference = " ".join(t for s in ex.reference for t in s)
            f_scores.append(scorer.score(reference, " ".join(tokens))["rougeL"].fmeasure)
            copied.update(set(tokens) & set(NAMES))
    assert sum(f_scores) / len(f_scores) > 0.8
    assert len(copied) >= len(NAMES) // 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_decoders_stay_on_cuda(untrained):
    model, batch = untrained
    model, batch = model.cuda(), batch.to("cuda")
    with torch.no_grad():
        enc = model.encode(batch)
        outs = [greedy(model, enc, 8),
                sample_and_greedy(model, enc, 8, generator=torch.Generator("cuda").manual_seed(0))]
    outs.append(beam_search(model, enc, beam_size=3, max_len=8, processors=[MinLength(2), BlockRepeatedTrigrams()]))
    for out in outs:
        assert out.ids.is_cuda and out.lengths.is_cuda
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model.mle_loss(batch)["loss"]
    assert loss.is_cuda and torch.isfinite(loss)


def test_sample_categorical_matches_its_distribution():
    probs = torch.tensor([[0.0, 0.1, 0.0, 0.6, 0.3, 0.0], [0.0, 0.0, 0.0, 0.0, 2.0, 2.0]])  # row 2 unnormalised
    draws = torch.stack([sample_categorical(probs, torch.Generator().manual_seed(s)) for s in range(4000)])
    freq = torch.stack([torch.bincount(draws[:, r], minlength=6).float() / len(draws) for r in range(2)])
    torch.testing.assert_close(freq, probs / probs.sum(1, keepdim=True), atol=0.025, rtol=0)
    assert (freq[probs == 0] == 0).all()  # zero-probability entries are never drawn


# ---- the step-processor seam and the copy mask ------------------------------------------------------------------
RECORDED = Path(__file__).parent / "data" / "decoding_e2caee7.json"


def recorded_setting(coverage: bool) -> tuple[PointerGenerator, Batch]:
    """The untrained models and articles whose decodes were recorded at commit e2caee7, before step processors:
    sharpened weights, so that argmax choices are far from ties and sequences end at different steps."""
    torch.manual_seed(0)
    vocab = toy_vocab()
    model = PointerGenerator(PointerGeneratorConfig(vocab_size=len(vocab), emb_dim=16, hidden_dim=24,
                                                    coverage=coverage, dec_layers=2 if coverage else 1))
    with torch.no_grad():
        model.out_vocab.weight.mul_(8)
        model.out_vocab.bias[model.config.eos_id] += 2.0
        model.v.weight.mul_(4)
        model.w_c.fill_(0.5)
    return model.eval(), collate(toy_corpus(8, seed=1), vocab)


def test_decoders_match_recorded_outputs():
    """With no copy mask and no extra processors, every decoder gives exactly what it gave before the seam."""
    recorded = json.loads(RECORDED.read_text())
    for coverage in (False, True):
        model, batch = recorded_setting(coverage)
        with torch.no_grad():
            enc = model.encode(batch)
            outs = {"greedy": greedy(model, enc, 12),
                    "sample": sample_and_greedy(model, enc, 12, generator=torch.Generator().manual_seed(0),
                                                with_greedy=False),
                    "sample_and_greedy": sample_and_greedy(model, enc, 12, samples=2,
                                                           generator=torch.Generator().manual_seed(1)),
                    "beam": beam_search(model, enc, beam_size=3, max_len=12, processors=[MinLength(4)]),
                    "beam_blocked": beam_search(model, enc, beam_size=3, max_len=12, length_penalty=0.5,
                                                processors=[BlockRepeatedTrigrams()])}
        for name, out in outs.items():
            expected = recorded[f"{'coverage' if coverage else 'plain'}/{name}"]
            assert out.ids.tolist() == expected["ids"], name
            assert out.lengths.tolist() == expected["lengths"], name
            rows = rollout_rows(len(batch), 2, True) if name == "sample_and_greedy" else list(range(len(batch)))
            scores = token_log_probs(model, enc.index_select(torch.tensor(rows)), out)  # what the decode chose
            torch.testing.assert_close(scores, torch.tensor(expected["log_probs"]), atol=1e-4, rtol=0)


def test_encoder_output_rows_follow_every_field(untrained):
    model, batch = untrained
    with torch.no_grad():
        enc = replace(model.encode(batch), copy_mask=torch.rand(batch.src.shape))
    index = torch.tensor([3, 0, 0])
    picked = enc.index_select(index)
    for f in fields(enc):
        value, got = getattr(enc, f.name), getattr(picked, f.name)
        if isinstance(value, torch.Tensor):
            assert torch.equal(got, value[index]), f.name
    for f in fields(enc.init):
        rows = 1 if f.name in ("h", "c") else 0  # [L, B, H] states
        assert torch.equal(getattr(picked.init, f.name), getattr(enc.init, f.name).index_select(rows, index)), f.name


def masked_encoding(model: PointerGenerator, batch: Batch, renormalize: bool, seed: int = 0):
    """The articles' encoding with a random copy mask: weight 2 on about half the tokens, 0 elsewhere."""
    keep = torch.rand(batch.src.shape, generator=torch.Generator().manual_seed(seed)) < 0.5
    return replace(model.encode(batch), copy_mask=keep.float() * (1.0 if renormalize else 2.0),
                   renormalize_copy=renormalize)


def test_copy_attention_follows_the_mask(untrained):
    """Scaled: a_i·w_i, not renormalised (Gehrmann et al.); renormalised: sums to 1 over the kept tokens, and a
    row that keeps none can copy nothing (it generates only)."""
    model, batch = untrained
    with torch.no_grad():
        enc = model.encode(batch)
    B, S = batch.src.shape
    attn = torch.softmax(torch.randn(B, S).masked_fill(~batch.src_mask, float("-inf")), -1)
    weights = (torch.rand(B, S, generator=torch.Generator().manual_seed(1)) < 0.5).float()
    weights[0] = 0  # article 0 keeps nothing
    copy, can_copy = model.copy_attention(attn, replace(enc, copy_mask=2 * weights))
    torch.testing.assert_close(copy, attn * 2 * weights)
    assert can_copy is None
    copy, can_copy = model.copy_attention(attn, replace(enc, copy_mask=weights, renormalize_copy=True))
    assert (copy[weights == 0] == 0).all() and (copy[0] == 0).all()
    assert can_copy.tolist() == [False] + [True] * (B - 1)
    torch.testing.assert_close(copy[1:].sum(-1), torch.ones(B - 1))
    logit = torch.randn(B)
    assert model._p_gen(logit, can_copy)[0] == 1
    torch.testing.assert_close(model._p_gen(logit, can_copy)[1:], torch.sigmoid(logit[1:]))
    copy, can_copy = model.copy_attention(attn, enc)  # no mask: the attention itself
    assert torch.equal(copy, attn) and can_copy is None


def test_masked_tokens_are_never_copied_and_renormalised_steps_sum_to_one(toy):
    vocab, _, batches, _, model = toy
    batch = batches[0]
    start = torch.full((len(batch),), vocab.bos_id)
    for renormalize in (False, True):
        with torch.no_grad():
            enc = masked_encoding(model, batch, renormalize)
            probs, _, _ = model.step_probs(enc, enc.init, start)
        masked = enc.copy_mask == 0
        checked = 0
        for b in range(len(batch)):  # an article OOV (never generated) seen only at masked positions: probability 0
            real = batch.src_mask[b]
            for x in set(batch.src_ext[b][real].tolist()) - set(range(len(vocab))):
                if bool(masked[b][(batch.src_ext[b] == x) & real].all()):
                    assert probs[b, x] == 0
                    checked += 1
                else:
                    assert probs[b, x] > 0
        assert checked > 0
        if renormalize:
            torch.testing.assert_close(probs.sum(-1), torch.ones(len(batch)), atol=1e-5, rtol=0)


def test_teacher_forcing_and_decoding_share_the_masked_copy(toy):
    """log p(target) under teacher forcing is the decoder's full distribution at the target, mask included."""
    _, _, batches, _, model = toy
    batch = batches[1]
    for renormalize in (False, True):
        with torch.no_grad():
            enc = masked_encoding(model, batch, renormalize, seed=2)
            out, p_gen_logit, attn, _ = model._unroll(enc, batch.dec_in)
            expected = model.log(model._extended_probs(out, p_gen_logit, attn, enc)).gather(
                -1, batch.target.unsqueeze(-1)).squeeze(-1) * batch.target_mask
            got = model.teacher_forced(enc, batch.dec_in, batch.target).log_probs
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        plain = model.teacher_forced(model.encode(batch), batch.dec_in, batch.target).log_probs
        assert not torch.allclose(got, plain)  # the mask changed something


def test_masked_beam_search_is_the_same_batched_or_one_by_one(toy):
    _, _, batches, _, model = toy
    batch = batches[2]
    for renormalize in (False, True):
        with torch.no_grad():
            enc = masked_encoding(model, batch, renormalize, seed=3)
        batched = beam_search(model, enc, beam_size=3, max_len=20, processors=[MinLength(3)])
        for i in range(len(batch)):
            with torch.no_grad():
                alone = replace(model.encode(batch.index_select([i])), copy_mask=enc.copy_mask[i:i + 1],
                                renormalize_copy=renormalize)
            single = beam_search(model, alone, beam_size=3, max_len=20, processors=[MinLength(3)])
            n = int(single.lengths[0])
            assert batched.ids[i, :n].tolist() == single.ids[0, :n].tolist() and batched.lengths[i] == n


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_tempered_teacher_forcing_is_the_tempered_step_distribution(toy, temperature):
    """Under teacher forcing at τ, log q(target_t) is the decoder's step distribution (<pad> and <s> removed, as
    the samplers do) raised to 1/τ and renormalised, at each target token; τ = 1 is the plain log p."""
    vocab, _, batches, model, _ = toy  # the early snapshot: a trained model is too sure for τ to show
    batch = batches[0]
    with torch.no_grad():
        enc = model.encode(batch)
        got = model.teacher_forced(enc, batch.dec_in, batch.target, temperature).log_probs
        state, expected = model.initial_state(enc), []
        for t in range(batch.target.size(1)):
            probs, state, _ = model.step_probs(enc, state, batch.dec_in[:, t])
            probs[:, [vocab.pad_id, vocab.bos_id]] = 0
            q = probs ** (1 / temperature)
            expected.append((q / q.sum(-1, keepdim=True)).gather(1, batch.target[:, t:t + 1]).squeeze(1).log())
        expected = torch.stack(expected, 1) * batch.target_mask
        plain = model.teacher_forced(enc, batch.dec_in, batch.target, 1.0).log_probs
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(got, plain, atol=1e-2)  # the temperature changes the distribution


def test_tempered_sampling_draws_from_the_tempered_distribution():
    """At τ, `sample_categorical` after `_multinomial`'s rescaling picks each token with frequency ∝ p^(1/τ)."""
    probs = torch.tensor([[0.6, 0.3, 0.1, 0.0]]).repeat(20000, 1)
    for temperature in (0.5, 2.0):
        drawn = _multinomial(torch.Generator().manual_seed(0), temperature)(probs, torch.arange(len(probs)),
                                                                            len(probs))
        q = probs[0] ** (1 / temperature)
        torch.testing.assert_close(torch.bincount(drawn, minlength=4) / len(drawn), q / q.sum(), atol=0.01, rtol=0)
    with pytest.raises(ValueError, match="temperature must be positive"):
        _multinomial(None, 0.0)
