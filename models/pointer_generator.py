"""Pointer-generator network (See et al. 2017, "Get To The Point"), a `models.summarizer.Summarizer`.

Shapes: B batch, S source length, T target length, H hidden size, E embedding size,
V model vocabulary, X = V + n_copy_oovs the batch's extended vocabulary (see `models.text.vocab`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.summarizer import TeacherForced, launch_bound
from models.text.batch import Batch
from models.text.vocab import Vocabulary


@dataclass
class PointerGeneratorConfig:
    vocab_size: int = 50_000
    emb_dim: int = 128
    hidden_dim: int = 256
    enc_layers: int = 1
    dec_layers: int = 1
    dropout: float = 0.0
    pointer: bool = True  # False: plain seq2seq with attention (p_gen fixed at 1)
    coverage: bool = False
    coverage_weight: float = 1.0
    eps: float = 1e-12  # added to probabilities before log, so p_gen at 0 or 1 never gives log(0)
    pad_id: int = Vocabulary.pad_id
    unk_id: int = Vocabulary.unk_id
    bos_id: int = Vocabulary.bos_id
    eos_id: int = Vocabulary.eos_id


def take_rows(value: Tensor, index: Tensor | slice, dim: int = 0) -> Tensor:
    """Rows `index` of `value` along `dim`: a view for a slice, a copy for a tensor of row numbers (repeats allowed).
    Both ways of copying add a repeated row's gradients up in backward; on a CPU `index_select` adds them in order,
    while indexing adds them with atomics across threads, in whatever order the threads get there: at 2 threads
    every run got another sum, and its own training trajectory (docs/RESULTS.md). On CUDA it is the other way round."""
    if isinstance(index, Tensor) and value.device.type == "cpu":
        return value.index_select(dim, index)
    return value[(slice(None),) * dim + (index,)]


@dataclass
class DecoderState:
    h: Tensor         # [L, B, H] LSTM hidden state per decoder layer
    c: Tensor         # [L, B, H] LSTM cell state
    context: Tensor   # [B, 2H] previous attention context h*_{t-1} (input feeding)
    coverage: Tensor  # [B, S] sum of past attention distributions

    def index_select(self, index: Tensor | slice) -> "DecoderState":
        return DecoderState(take_rows(self.h, index, 1), take_rows(self.c, index, 1), take_rows(self.context, index),
                            take_rows(self.coverage, index))


@dataclass
class EncoderOutput:
    outputs: Tensor    # [B, S, 2H] bi-LSTM outputs h_i
    features: Tensor   # [B, S, 2H] 2 W_h h_i (doubled for the sigmoid form of attention), once per article
    mask: Tensor       # [B, S] True where attention may look
    src_ext: Tensor    # [B, S] extended ids: where copied attention mass goes
    n_copy_oovs: int
    init: DecoderState
    copy_mask: Tensor | None = None  # [B, S] weights on the copy attention (bottom-up copying); None: copy freely
    renormalize_copy: bool = False   # the weighted copy attention is renormalised to sum to 1 (else used as is)

    def index_select(self, index: Tensor | slice) -> "EncoderOutput":
        """Rows `index` of every field that has rows (repeat rows for sampling twice, reorder beams; a slice: views)."""
        def rows(value):
            if isinstance(value, Tensor):
                return take_rows(value, index)
            return value.index_select(index) if isinstance(value, DecoderState) else value
        return replace(self, **{f.name: rows(getattr(self, f.name)) for f in fields(self)})


def _reverse_rows(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse the first lengths[b] positions of each row of x [B, S, D], padding left in place (an involution)."""
    pos = torch.arange(x.size(1), device=x.device)
    index = torch.where(pos < lengths[:, None], lengths[:, None] - 1 - pos, pos)
    return x.gather(1, index.unsqueeze(-1).expand_as(x))


def _run_lstm(lstm: nn.LSTM, x: Tensor, lengths: list[int]) -> tuple[Tensor, Tensor, Tensor]:
    """A one-layer LSTM over rows sorted by decreasing length: outputs [B, S, H] (zeros on padding) and each row's
    final h and c [B, H]. Like a PackedSequence, but one plain (cuDNN / oneDNN) call per distinct length."""
    B, H = x.size(0), lstm.hidden_size
    h = c = x.new_zeros(1, B, H)
    outputs, start = [], 0
    for end in sorted(set(lengths)):
        n = sum(length >= end for length in lengths)  # rows still going: a prefix, as rows are sorted
        out, (h_n, c_n) = lstm(x[:n, start:end], (h[:, :n], c[:, :n]))
        outputs.append(F.pad(out, (0, 0, 0, 0, 0, B - n)))
        h, c = torch.cat([h_n, h[:, n:]], 1), torch.cat([c_n, c[:, n:]], 1)
        start = end
    out = torch.cat(outputs, 1)
    return F.pad(out, (0, 0, 0, x.size(1) - out.size(1))), h[0], c[0]


class BiLSTMEncoder(nn.Module):
    """Bidirectional multi-layer LSTM over right-padded rows; the backward direction reads each row reversed.
    Plain LSTM calls, not a PackedSequence: PyTorch's packed LSTM is much slower on CPU (scripts/bench_training.py)."""

    def __init__(self, input_size: int, hidden_size: int, layers: int, dropout: float):
        super().__init__()
        sizes = [input_size] + [2 * hidden_size] * (layers - 1)
        self.fw = nn.ModuleList(nn.LSTM(n, hidden_size, batch_first=True) for n in sizes)
        self.bw = nn.ModuleList(nn.LSTM(n, hidden_size, batch_first=True) for n in sizes)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x [B, S, D], lengths [B] >= 1 -> outputs [B, S, 2H], top layer's final [h_fw; h_bw] and [c_fw; c_bw]."""
        order = lengths.argsort(descending=True)
        x, lengths = x[order], lengths[order]
        lens = lengths.tolist()
        for i, (fw, bw) in enumerate(zip(self.fw, self.bw)):
            if i > 0:
                x = self.dropout(x)
            out_fw, h_fw, c_fw = _run_lstm(fw, x, lens)
            out_bw, h_bw, c_bw = _run_lstm(bw, _reverse_rows(x, lengths), lens)
            x = torch.cat([out_fw, _reverse_rows(out_bw, lengths)], -1)
        unsort = order.argsort()
        return x[unsort], torch.cat([h_fw, h_bw], -1)[unsort], torch.cat([c_fw, c_bw], -1)[unsort]


class PointerGenerator(nn.Module):
    def __init__(self, config: PointerGeneratorConfig):
        super().__init__()
        self.config = cfg = config
        E, H = cfg.emb_dim, cfg.hidden_dim
        self.embedding = nn.Embedding(cfg.vocab_size, E, padding_idx=cfg.pad_id)  # shared by encoder and decoder
        self.encoder = BiLSTMEncoder(E, H, cfg.enc_layers, cfg.dropout)
        self.reduce_h = nn.Linear(2 * H, cfg.dec_layers * H)  # final fw/bw states -> decoder init
        self.reduce_c = nn.Linear(2 * H, cfg.dec_layers * H)
        self.W_h = nn.Linear(2 * H, 2 * H, bias=False)  # encoder features
        self.W_s = nn.Linear(2 * H, 2 * H)  # decoder features [s_t = (h; c)], its bias is b_attn
        # Zero-init so switching coverage on late (as See et al. do) starts from the trained attention;
        # it exists even with coverage off so that checkpoints load either way.
        self.w_c = nn.Parameter(torch.zeros(2 * H))
        self.v = nn.Linear(2 * H, 1, bias=False)
        self.input_feed = nn.Linear(E + 2 * H, E)  # x_t from the embedding and the previous context
        self.decoder = nn.ModuleList(nn.LSTMCell(E if i == 0 else H, H) for i in range(cfg.dec_layers))
        self.p_gen = nn.Linear(2 * H + 2 * H + E, 1)  # [h*_t; s_t = (h; c); x_t]
        self.out_hidden = nn.Linear(3 * H, H)  # V [s_t; h*_t] + b
        self.out_vocab = nn.Linear(H, cfg.vocab_size)  # V' (.) + b'
        self.dropout = nn.Dropout(cfg.dropout)
        # Parameters this configuration leaves out get no gradient: DDP would wait for them forever.
        self.w_c.requires_grad_(cfg.coverage)
        self.p_gen.requires_grad_(cfg.pointer)

    # ---- encoder -------------------------------------------------------------------------------
    def encode(self, batch: Batch) -> EncoderOutput:
        mask = batch.src_mask.clone()
        mask[:, 0] = True  # an empty article still gets one (pad) position to attend to, never a NaN softmax
        outputs, h_n, c_n = self.encoder(self.dropout(self.embedding(batch.src)), mask.sum(1))
        B, L, H = batch.src.size(0), self.config.dec_layers, self.config.hidden_dim

        def reduce(layer: nn.Linear, final: Tensor) -> Tensor:  # [B, 2H] -> [L, B, H]
            return F.relu(layer(final)).view(B, L, H).transpose(0, 1).contiguous()

        init = DecoderState(reduce(self.reduce_h, h_n), reduce(self.reduce_c, c_n),
                            outputs.new_zeros(B, 2 * H), outputs.new_zeros(mask.shape, dtype=torch.float))
        return EncoderOutput(outputs, 2 * self.W_h(outputs), mask, batch.src_ext, batch.n_copy_oovs, init)

    def initial_state(self, enc: EncoderOutput) -> DecoderState:
        return enc.init

    # ---- one recurrent step (shared by teacher forcing and decoding) ---------------------------------
    def _embed(self, ids: Tensor) -> Tensor:
        ids = ids.masked_fill(ids >= self.config.vocab_size, self.config.unk_id)  # copied OOVs are read as <unk>
        return self.dropout(self.embedding(ids))

    def _recur(self, enc: EncoderOutput, state: DecoderState, emb: Tensor
               ) -> tuple[DecoderState, Tensor, Tensor, Tensor]:
        """Advance the decoder by one token; returns (state, attention [B, S], p_gen logit [B], coverage loss [B])."""
        x = self.input_feed(torch.cat([emb, state.context], -1))
        hs, cs, inp = [], [], x
        for i, cell in enumerate(self.decoder):
            h, c = cell(inp, (state.h[i], state.c[i]))
            hs.append(h)
            cs.append(c)
            inp = self.dropout(h) if i + 1 < len(self.decoder) else h
        s_t = torch.cat([h, c], -1)
        # e_i = v·tanh(z_i), z_i = W_h h_i + W_s s_t (+ w_c c_i) + b_attn, computed as 2 v·σ(2 z_i) - Σv: the same
        # value, but torch's CPU sigmoid is faster than its tanh. In place, so one [B, S, 2H] buffer per step.
        z2 = enc.features + 2 * self.W_s(s_t).unsqueeze(1)
        if self.config.coverage:  # the coverage *before* this step's attention
            z2 = z2.addcmul_(state.coverage.unsqueeze(-1).to(z2.dtype), self.w_c, value=2)
        v = self.v.weight.squeeze(0)
        scores = (2 * (z2.sigmoid_() @ v) - v.sum()).float().masked_fill(~enc.mask, float("-inf"))
        attn = torch.softmax(scores, -1)
        context = torch.bmm(attn.unsqueeze(1).to(enc.outputs.dtype), enc.outputs).squeeze(1)
        p_gen_logit = self.p_gen(torch.cat([context, s_t, x], -1)).squeeze(-1)
        if self.config.coverage:
            cov_loss = torch.minimum(attn, state.coverage).sum(-1)
            coverage = state.coverage + attn
        else:
            cov_loss, coverage = attn.new_zeros(attn.size(0)), state.coverage
        return DecoderState(torch.stack(hs), torch.stack(cs), context, coverage), attn, p_gen_logit, cov_loss

    def _p_gen(self, logit: Tensor, can_copy: Tensor | None = None) -> Tensor:
        """p_gen in fp32: 1 without a pointer, and where `can_copy` (from `copy_attention`) is False."""
        p_gen = torch.sigmoid(logit.float()) if self.config.pointer else torch.ones_like(logit, dtype=torch.float)
        return p_gen if can_copy is None else torch.where(can_copy, p_gen, torch.ones_like(p_gen))

    def log(self, p: Tensor) -> Tensor:
        """log(p + eps), capped at 0 where rounding pushed a mixture of probabilities above 1."""
        return torch.log(p + self.config.eps).clamp(max=0.0)

    def _vocab_logits(self, out: Tensor) -> Tensor:
        """V'(V [s_t; h*_t] + b) + b' in fp32, for any leading shape."""
        return self.out_vocab(self.out_hidden(self.dropout(out))).float()

    def copy_attention(self, attn: Tensor, enc: EncoderOutput) -> tuple[Tensor, Tensor | None]:
        """The attention that copying spreads 1 − p_gen over, fp32, for one step (attn [B, S]) or all
        (attn [B, T, S]), and where anything can be copied (None: everywhere). With `enc.copy_mask` the attention
        is weighted by it, then renormalised or used as is (Gehrmann et al.'s `attn · tags · 2`); renormalised, a
        row with no copyable token generates only (p_gen = 1), so the distribution still sums to 1."""
        attn = attn.float()
        if enc.copy_mask is None:
            return attn, None
        attn = attn * (enc.copy_mask if attn.dim() == 2 else enc.copy_mask.unsqueeze(1))
        if not enc.renormalize_copy:
            return attn, None
        total = attn.sum(-1, keepdim=True)
        return attn / total.clamp(min=torch.finfo(attn.dtype).tiny), total.squeeze(-1) > 0

    def _extended_probs(self, out: Tensor, p_gen_logit: Tensor, attn: Tensor, enc: EncoderOutput) -> Tensor:
        """p_gen P_vocab (zero-extended) + (1 − p_gen) Σ_{i: src_i = w} a_i (the copy attention), over [..., X],
        in fp32."""
        copy, can_copy = self.copy_attention(attn, enc)
        p_gen = self._p_gen(p_gen_logit, can_copy).unsqueeze(-1)
        p = F.pad(p_gen * torch.softmax(self._vocab_logits(out), -1), (0, enc.n_copy_oovs))
        src_ext = enc.src_ext if attn.dim() == 2 else enc.src_ext.unsqueeze(1).expand_as(attn)
        return p.scatter_add_(-1, src_ext, (1 - p_gen) * copy)  # repeated source words add up

    def step_probs(self, enc: EncoderOutput, state: DecoderState, input_ids: Tensor
                   ) -> tuple[Tensor, DecoderState, Tensor]:
        """One decoder step from extended ids [B]: (probabilities [B, X] fp32, new state, attention [B, S]).
        Samplers and greedy decoding need no log over the whole vocabulary: only of the chosen token."""
        state, attn, p_gen_logit, _ = self._recur(enc, state, self._embed(input_ids))
        out = torch.cat([state.h[-1], state.context], -1)
        return self._extended_probs(out, p_gen_logit, attn, enc), state, attn

    def step(self, enc: EncoderOutput, state: DecoderState, input_ids: Tensor
             ) -> tuple[Tensor, DecoderState, Tensor]:
        """`step_probs` as log-probabilities (beam search adds them up)."""
        probs, state, attn = self.step_probs(enc, state, input_ids)
        return self.log(probs), state, attn

    # ---- teacher forcing (the training hot path) -----------------------------------------------------
    def _unroll(self, enc: EncoderOutput, dec_in: Tensor, lengths: Tensor | None = None
                ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Run the decoder over `dec_in` [B, T]: outputs [B, T, 3H], p_gen logits, attention [B, T, S], coverage loss.
        With `lengths` [B] each row stops after its own length (zeros beyond): rows are sorted by length, so the rows
        still going are a prefix, as in `_run_lstm`. On a CPU a step costs its rows, and the attention keeps
        [rows, S, 2H] per step for the backward pass."""
        B, T = dec_in.shape
        order = None if lengths is None else lengths.argsort(descending=True, stable=True)
        if order is not None:
            enc, dec_in = enc.index_select(order), dec_in[order]
            going = (lengths[order].unsqueeze(0) > torch.arange(T, device=dec_in.device).unsqueeze(1)).sum(1).tolist()
        else:
            going = [B] * T
        state, emb = enc.init, self._embed(dec_in)
        outs, p_gen_logits, attns, cov_losses = [], [], [], []
        for n, emb_t in zip(going, emb.unbind(1)):
            if n == 0:
                break
            if n < state.context.size(0):
                enc, state = enc.index_select(slice(None, n)), state.index_select(slice(None, n))
            state, attn, p_gen_logit, cov_loss = self._recur(enc, state, emb_t[:n])
            outs.append(torch.cat([state.h[-1], state.context], -1))
            p_gen_logits.append(p_gen_logit)
            attns.append(attn)
            cov_losses.append(cov_loss)

        if order is None:
            return torch.stack(outs, 1), torch.stack(p_gen_logits, 1), torch.stack(attns, 1), torch.stack(cov_losses, 1)
        given = order.argsort()

        def stacked(steps: list[Tensor]) -> Tensor:  # [B, T, ...] in the given rows' order, zeros after each row's end
            x = torch.stack([F.pad(step, (0, 0) * (step.dim() - 1) + (0, B - step.size(0))) for step in steps], 1)
            return F.pad(x, (0, 0) * (x.dim() - 2) + (0, T - x.size(1)))[given]
        return stacked(outs), stacked(p_gen_logits), stacked(attns), stacked(cov_losses)

    def teacher_forced(self, enc: EncoderOutput, dec_in: Tensor, target: Tensor,
                       temperature: float = 1.0) -> TeacherForced:
        """log p(target_t | target_<t) for extended-id targets [B, T], without forming [B, T, X]. With a
        `temperature` τ ≠ 1: log q(target_t) for q ∝ p^(1/τ) without <pad> and <s>, the distribution that a
        sampler at τ draws from (its normaliser needs all of [B, T, X])."""
        real = target != self.config.pad_id  # only these positions go through the big output layer
        lengths = None  # where a step is launch-bound, every row runs to the width: fewer launches than stopping
        if not launch_bound(dec_in.device):  # <pad> only after the end: a row's length is its last real position
            lengths = (real * torch.arange(1, real.size(1) + 1, device=real.device)).amax(1)
        out, p_gen_logit, attn, cov_loss = self._unroll(enc, dec_in, lengths)
        if temperature != 1.0:
            scaled = self.log(self._extended_probs(out, p_gen_logit, attn, enc)) / temperature  # [B, T, X]
            scaled[..., [self.config.pad_id, self.config.bos_id]] = float("-inf")  # never drawn (decoding._processors)
            log_q = scaled.log_softmax(-1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
            return TeacherForced(log_q.masked_fill(~real, 0.0), cov_loss)
        tgt = target[real]
        logits = self._vocab_logits(out[real])  # [N, V]
        in_vocab = tgt < self.config.vocab_size  # P_vocab of a copied OOV is 0
        p_vocab = torch.exp(-F.cross_entropy(logits, tgt.clamp(max=self.config.vocab_size - 1), reduction="none"))
        p_vocab = p_vocab * in_vocab
        copy, can_copy = self.copy_attention(attn, enc)
        p_copy = (copy * (enc.src_ext.unsqueeze(1) == target.unsqueeze(-1))).sum(-1)[real]
        p_gen = self._p_gen(p_gen_logit[real], None if can_copy is None else can_copy[real])
        log_p = self.log(p_gen * p_vocab + (1 - p_gen) * p_copy)
        return TeacherForced(torch.zeros_like(target, dtype=torch.float).masked_scatter(real, log_p), cov_loss)

    def mle_loss(self, batch: Batch, enc: EncoderOutput | None = None,
                 forced: TeacherForced | None = None) -> dict[str, Tensor]:
        """Token-averaged NLL of the reference (and coverage loss); pass `enc` to reuse an encoding, or `forced`, a
        teacher-forced pass whose first B rows and T columns are the references' (made together with other rows)."""
        tf = forced or self.teacher_forced(enc if enc is not None else self.encode(batch), batch.dec_in, batch.target)
        B, T = batch.target.shape
        tf = TeacherForced(tf.log_probs[:B, :T], tf.coverage_loss[:B, :T])
        mask = batch.target_mask.float()
        n = mask.sum().clamp(min=1)
        nll = -(tf.log_probs * mask).sum() / n
        coverage = (tf.coverage_loss * mask).sum() / n
        loss = nll + self.config.coverage_weight * coverage if self.config.coverage else nll
        return {"loss": loss, "nll": nll, "coverage": coverage}
