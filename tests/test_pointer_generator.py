import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from models.pointer_generator import BiLSTMEncoder, PointerGenerator, PointerGeneratorConfig
from models.text.batch import Example, collate
from models.text.vocab import Vocabulary

WORDS = "the cat sat on a mat dog ran to park and . big red".split()


@pytest.fixture
def vocab() -> Vocabulary:
    return Vocabulary(WORDS)


@pytest.fixture
def batch(vocab):
    """Duplicated source words, article OOVs (zorblax twice), a reference-only OOV (flurb), ragged lengths."""
    examples = [
        Example("a", "the zorblax sat on the mat near zorblax .".split(), [["zorblax", "sat", "on", "the", "mat", "."]]),
        Example("b", "a dog ran to the quimbey park".split(), [["dog", "ran", "quimbey", "flurb", "."]]),
        Example("c", "big red cat".split(), [["big", "cat", "cat", "."]]),
    ]
    return collate(examples, vocab)


def make_model(vocab: Vocabulary, seed: int = 0, **overrides) -> PointerGenerator:
    torch.manual_seed(seed)
    config = PointerGeneratorConfig(vocab_size=len(vocab), emb_dim=8, hidden_dim=12, **overrides)
    return PointerGenerator(config)


def extended_log_probs(model: PointerGenerator, batch) -> torch.Tensor:
    """log p over the extended vocabulary at every target position, [B, T, X]: the whole teacher-forced distribution,
    of which `teacher_forced` and the decoders' steps each compute a part."""
    enc = model.encode(batch)
    out, p_gen_logit, attn, _ = model._unroll(enc, batch.dec_in)
    return model.log(model._extended_probs(out, p_gen_logit, attn, enc))


def saturate_p_gen(model: PointerGenerator, value: float) -> None:
    with torch.no_grad():
        model.p_gen.bias.fill_(value)


@pytest.mark.parametrize("overrides", [{}, {"coverage": True}, {"pointer": False}, {"enc_layers": 2, "dec_layers": 2}])
def test_extended_distribution_sums_to_one(vocab, batch, overrides):
    model = make_model(vocab, **overrides)
    full = extended_log_probs(model, batch)
    assert full.shape == (3, batch.target.size(1), len(vocab) + batch.n_copy_oovs)
    assert full.dtype == torch.float32
    torch.testing.assert_close(full.exp().sum(-1), torch.ones(full.shape[:2]), atol=1e-5, rtol=0)
    enc = model.encode(batch)
    log_probs, _, _ = model.step(enc, model.initial_state(enc), batch.dec_in[:, 0])
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(3), atol=1e-5, rtol=0)


def test_copy_distribution_sums_attention_over_repeated_source_words(vocab, batch):
    """With p_gen = 0 the distribution is the attention, summed over the positions holding each word."""
    model = make_model(vocab)
    saturate_p_gen(model, -1e4)
    enc = model.encode(batch)
    log_probs, _, attn = model.step(enc, model.initial_state(enc), batch.dec_in[:, 0])
    expected = torch.zeros_like(log_probs)
    for b in range(3):
        for i, word in enumerate(batch.src_ext[b].tolist()):
            if batch.src_mask[b, i]:
                expected[b, word] += attn[b, i]
    torch.testing.assert_close(log_probs.exp(), expected, atol=1e-6, rtol=0)
    zorblax = len(vocab)  # appears twice in article "a"
    assert expected[0, zorblax] > attn[0, 1]
    assert torch.all(attn[~batch.src_mask] == 0)  # padding gets no attention


def test_p_gen_one_is_the_plain_seq2seq_distribution(vocab, batch):
    pointer = make_model(vocab)
    saturate_p_gen(pointer, 1e4)
    plain = make_model(vocab, pointer=False)
    plain.load_state_dict(pointer.state_dict())  # same parameter names either way
    V = len(vocab)
    torch.testing.assert_close(extended_log_probs(pointer, batch)[..., :V], extended_log_probs(plain, batch)[..., :V])


@pytest.mark.parametrize("bias", [1e4, -1e4])
@pytest.mark.parametrize("coverage", [False, True])
def test_saturated_p_gen_stays_finite(vocab, batch, bias, coverage):
    """p_gen = 1 makes copied OOV targets impossible, p_gen = 0 makes targets absent from the source
    impossible: log-probs, loss and gradients must stay finite anyway (See et al.'s NaN)."""
    model = make_model(vocab, coverage=coverage)
    saturate_p_gen(model, bias)
    p_gen = torch.sigmoid(torch.tensor(bias))
    assert p_gen in (0.0, 1.0)
    assert torch.isfinite(extended_log_probs(model, batch)).all()
    out = model.mle_loss(batch)
    assert torch.isfinite(out["loss"])
    out["loss"].backward()
    for name, param in model.named_parameters():
        assert param.grad is None or torch.isfinite(param.grad).all(), name


@pytest.mark.parametrize("coverage", [False, True])
def test_bf16_autocast_keeps_final_distribution_fp32(vocab, batch, coverage):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = make_model(vocab, coverage=coverage).to(device)
    batch = batch.to(device)
    saturate_p_gen(model, 1e4)
    # oneDNN's bf16 LSTM needs AVX512-BF16, which many CPUs lack; the native CPU kernel runs anywhere.
    with torch.backends.mkldnn.flags(enabled=device == "cuda"), torch.autocast(device, dtype=torch.bfloat16):
        enc = model.encode(batch)
        full = extended_log_probs(model, batch)
        tf = model.teacher_forced(enc, batch.dec_in, batch.target)
        loss = model.mle_loss(batch)["loss"]
    assert full.dtype == tf.log_probs.dtype == torch.float32
    assert torch.isfinite(full).all() and torch.isfinite(tf.log_probs).all()
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("coverage", [False, True])
def test_teacher_forced_matches_gathered_full_distribution(vocab, batch, coverage):
    model = make_model(vocab, coverage=coverage)
    tf = model.teacher_forced(model.encode(batch), batch.dec_in, batch.target)
    reference = extended_log_probs(model, batch).gather(2, batch.target.unsqueeze(-1)).squeeze(-1)
    mask = batch.target_mask
    torch.testing.assert_close(tf.log_probs[mask], reference[mask], atol=1e-5, rtol=1e-5)
    assert torch.isfinite(tf.log_probs).all()
    # an OOV target is scored by copying alone
    assert batch.target[0, 0] == len(vocab) and tf.log_probs[0, 0] > -20


def test_step_loop_matches_forward_and_coverage_loss(vocab, batch):
    """Driving `step` by hand reproduces forward(); coverage loss uses the coverage before this step's attention."""
    model = make_model(vocab, coverage=True)
    with torch.no_grad():
        model.w_c.normal_()  # make coverage change the attention
    enc = model.encode(batch)
    state, coverage = model.initial_state(enc), torch.zeros(batch.src.shape)
    step_log_probs, expected_cov_loss = [], []
    for t in range(batch.dec_in.size(1)):
        log_probs, state, attn = model.step(enc, state, batch.dec_in[:, t])
        step_log_probs.append(log_probs)
        expected_cov_loss.append(torch.minimum(attn, coverage).sum(-1))
        coverage = coverage + attn
    torch.testing.assert_close(torch.stack(step_log_probs, 1), extended_log_probs(model, batch), atol=1e-5, rtol=1e-5)
    tf, mask = model.teacher_forced(enc, batch.dec_in, batch.target), batch.target_mask
    torch.testing.assert_close(tf.coverage_loss[mask], torch.stack(expected_cov_loss, 1)[mask], atol=1e-6, rtol=1e-5)
    assert torch.all(tf.coverage_loss[:, 0] == 0) and torch.all(tf.coverage_loss[:, 1:][mask[:, 1:]] > 0)
    assert not mask.all() and torch.all(tf.coverage_loss[~mask] == 0)  # a row's pass stops at its end (on a CPU)
    torch.testing.assert_close(state.coverage, coverage)


def test_coverage_off_ignores_w_c_and_reports_zero_coverage_loss(vocab, batch):
    model = make_model(vocab)
    before = extended_log_probs(model, batch)
    with torch.no_grad():
        model.w_c.normal_()
    torch.testing.assert_close(extended_log_probs(model, batch), before)
    assert torch.all(model.teacher_forced(model.encode(batch), batch.dec_in, batch.target).coverage_loss == 0)
    assert model.state_dict().keys() == make_model(vocab, coverage=True).state_dict().keys()


@pytest.mark.parametrize("overrides", [{}, {"coverage": True}, {"pointer": False}])
def test_every_trainable_parameter_gets_a_gradient(vocab, batch, overrides):
    # DDP waits for the gradient of every parameter that requires one: a configuration's unused
    # parameters (w_c without coverage, p_gen without the pointer) must not require one.
    model = make_model(vocab, **overrides)
    model.mle_loss(batch)["loss"].backward()
    assert [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None] == []


def test_copied_oov_is_fed_back_as_unk(vocab, batch):
    model = make_model(vocab)
    enc = model.encode(batch)
    state = model.initial_state(enc)
    oov = torch.full((3,), len(vocab))
    unk = torch.full((3,), vocab.unk_id)
    torch.testing.assert_close(model.step(enc, state, oov)[0], model.step(enc, state, unk)[0])


def test_padding_does_not_change_results(vocab, batch):
    """Example "c" alone (no padding) scores exactly as inside the padded batch."""
    model = make_model(vocab)
    alone = collate([Example("c", "big red cat".split(), [["big", "cat", "cat", "."]])], vocab)
    T = alone.target.size(1)
    torch.testing.assert_close(extended_log_probs(model, alone)[0, :, :len(vocab)],
                               extended_log_probs(model, batch)[2, :T, :len(vocab)], atol=1e-6, rtol=1e-5)


def test_mle_loss_is_token_mean_nll_plus_weighted_coverage(vocab, batch):
    model = make_model(vocab, coverage=True, coverage_weight=0.5)
    out = model.mle_loss(batch)
    mask = batch.target_mask
    log_p = extended_log_probs(model, batch).gather(2, batch.target.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(out["nll"], -log_p[mask].mean(), atol=1e-5, rtol=1e-5)
    cov = model.teacher_forced(model.encode(batch), batch.dec_in, batch.target).coverage_loss
    torch.testing.assert_close(out["coverage"], cov[mask].mean())
    torch.testing.assert_close(out["loss"], out["nll"] + 0.5 * out["coverage"])


def test_empty_article_gives_finite_loss(vocab):
    batch = collate([Example("e", [], [["cat", "."]]), Example("f", ["cat"], [["cat", "."]])], vocab)
    model = make_model(vocab)
    assert torch.isfinite(extended_log_probs(model, batch)).all() and torch.isfinite(model.mle_loss(batch)["loss"])


@pytest.mark.parametrize("layers", [1, 2])
def test_encoder_matches_packed_bidirectional_lstm(layers):
    """The segment-wise encoder equals torch's packed bi-LSTM with the same weights."""
    torch.manual_seed(0)
    encoder = BiLSTMEncoder(5, 7, layers, dropout=0.0)
    reference = torch.nn.LSTM(5, 7, layers, batch_first=True, bidirectional=True)
    with torch.no_grad():
        for i in range(layers):
            for direction, suffix in ((encoder.fw[i], ""), (encoder.bw[i], "_reverse")):
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    getattr(reference, f"{name}_l{i}{suffix}").copy_(getattr(direction, f"{name}_l0"))
    lengths = torch.tensor([3, 6, 1, 6, 4])
    x = torch.randn(5, 6, 5)
    outputs, h, c = encoder(x, lengths)
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    ref_out, (ref_h, ref_c) = reference(packed)
    ref_out, _ = pad_packed_sequence(ref_out, batch_first=True, total_length=6)
    torch.testing.assert_close(outputs, ref_out)
    torch.testing.assert_close(h, torch.cat([ref_h[-2], ref_h[-1]], -1))
    torch.testing.assert_close(c, torch.cat([ref_c[-2], ref_c[-1]], -1))
