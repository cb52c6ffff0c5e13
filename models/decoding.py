"""Batched decoders for the pointer-generator: greedy, multinomial sampling, and beam search.

Every decoder takes the encoded articles (`model.encode(batch)`, copy mask included) and returns extended ids
(see `models.text.vocab`) masked after the first </s>: the </s> step counts in `lengths`, later positions hold
<pad> (0). <pad> and <s> are never emitted (so a <pad> in `ids` always means "after </s>"). Decodes carry no
log-probabilities: training re-scores its samples with `model.teacher_forced`, with gradient. Rules on which tokens
may come next are step processors, applied the same way by every decoder. Decoders run in the model's current mode:
call `model.eval()` first unless dropout is wanted.
"""
from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, Protocol, Sequence

import torch
from torch import Tensor

from models.summarizer import Encoded, Summarizer, launch_bound
from models.text.vocab import Vocabulary


@dataclass
class Decoded:
    ids: Tensor        # [B, T] extended ids, <pad> after the first </s>
    lengths: Tensor    # [B] tokens up to and including the first </s>; T if there is none

    def select(self, index: slice | list[int]) -> "Decoded":
        """A subset of rows, trimmed to its own longest sequence."""
        lengths = self.lengths[index]
        T = int(lengths.max()) if lengths.numel() else 0
        return Decoded(self.ids[index, :T], lengths)


class Chooser(Protocol):
    """Picks the next token of each row still decoding: `probs` [N, X] after the step processors, `rows` [N] their
    rows in the batch of `n_rows` -> ids [N]."""

    def __call__(self, probs: Tensor, rows: Tensor, n_rows: int) -> Tensor: ...


class StepProcessor(Protocol):
    """Forbids next tokens: writes `blocked` (0 for probabilities, −inf for log-probabilities) into `scores`
    [N, X] in place, given the tokens so far, `history` [N, t] (t = the step). `check(max_len)` raises where the
    rule could not work in a decode of at most `max_len` tokens (called when a run is built). The test-time rules are
    configured as a list (conf/module/summarizer.yaml, `beam.processors`)."""

    def __call__(self, scores: Tensor, history: Tensor, blocked: float) -> None: ...

    def check(self, max_len: int) -> None: ...


@dataclass
class ForbidTokens:
    """Never emit these ids (column by column: no index tensor to build and copy to the device at every step)."""
    ids: Sequence[int]

    def __call__(self, scores: Tensor, history: Tensor, blocked: float) -> None:
        for i in self.ids:
            scores[:, i] = blocked

    def check(self, max_len: int) -> None:
        pass


@dataclass
class MinLength:
    """</s> only after `min_len` tokens."""
    min_len: int
    eos_id: int = Vocabulary.eos_id

    def __call__(self, scores: Tensor, history: Tensor, blocked: float) -> None:
        if history.size(1) < self.min_len:
            scores[:, self.eos_id] = blocked

    def check(self, max_len: int) -> None:
        if not 0 <= self.min_len < max_len:  # from max_len on, </s> is never allowed: every summary would be cut off
            raise ValueError(f"beam search: min_len must be at least 0 and below max_len ({max_len}), got "
                             f"{self.min_len}")


class BlockRepeatedTrigrams:
    """No token that would repeat a trigram already in the history."""

    def __call__(self, scores: Tensor, history: Tensor, blocked: float) -> None:
        if history.size(1) >= 3:
            match = (history[:, :-2] == history[:, -2:-1]) & (history[:, 1:-1] == history[:, -1:])
            repeated = torch.zeros_like(scores).scatter_reduce_(1, history[:, 2:], match.to(scores.dtype), "amax")
            scores.masked_fill_(repeated.bool(), blocked)

    def check(self, max_len: int) -> None:
        pass


def _processors(model: Summarizer, extra: Sequence[StepProcessor]) -> list[StepProcessor]:
    """<pad> and <s> are never outputs (a <pad> in the output means "after </s>"), whatever else is asked."""
    return [ForbidTokens((model.config.pad_id, model.config.bos_id)), *extra]


# Ended rows leave the decoded batch once they are this share of it: each shrink copies the encoder outputs, so not
# at every </s>.
SHRINK_AT = 0.25
# Steps between two looks at which rows have ended, where the decode step is launch-bound (`launch_bound`).
CHECK_EVERY_LAUNCH_BOUND = 8
# On CUDA, a decode without gradient replays each step from one captured CUDA graph (`CapturedStep`); the environment's
# SUMRL_CUDA_GRAPHS=0 keeps the eager loop (a model whose step cannot be captured, or to compare).
CUDA_GRAPHS = os.environ.get("SUMRL_CUDA_GRAPHS", "1") != "0"


class Step:
    """The decoder's next-token probabilities from the chosen ids, `model.step_probs`, keeping its state."""

    def __init__(self, model: Summarizer, enc: Encoded):
        self.model, self.enc, self.state = model, enc, model.initial_state(enc)

    def __call__(self, ids: Tensor) -> Tensor:
        probs, self.state, _ = self.model.step_probs(self.enc, self.state, ids)
        return probs

    def keep(self, rows: Tensor) -> None:
        """Only these rows decode on."""
        self.enc, self.state = self.enc.index_select(rows), self.state.index_select(rows)


@cache
def _capture_stream(device: torch.device) -> torch.cuda.Stream:
    """One side stream for every capture: the allocator caches freed blocks per stream, and `torch.cuda.Stream()`
    hands out a pool's streams in turn, so a new one per decode would keep its warm-up's memory on each of them."""
    return torch.cuda.Stream(device)


# The latest graph per device. Each capture shares its memory pool, so that a finished decode's graph memory serves the
# next; keeping it keeps the pool open between decodes (a pool whose graphs are all gone is released).
_LATEST_GRAPH: dict[torch.device, torch.cuda.CUDAGraph] = {}


class CapturedStep(Step):
    """`Step`, captured once as a CUDA graph and replayed: a decoder step is a few dozen small kernels, and on a GPU
    launching them is its time (docs/RESULTS.md). The graph copies the new state into its own inputs, so a replay
    needs only the chosen ids copied in; its shapes are fixed, so rows cannot leave (no `keep`). The tokens are the
    eager loop's (tests/test_rl_step.py)."""

    def __init__(self, model: Summarizer, enc: Encoded):
        super().__init__(model, enc)
        self.state = replace(self.state, **{name: t.clone() for name, t in vars(self.state).items()})
        self.ids = torch.full((enc.src_ext.size(0),), model.config.bos_id, dtype=torch.long, device=enc.src_ext.device)
        self.graph = torch.cuda.CUDAGraph()
        stream = _capture_stream(enc.src_ext.device)
        stream.wait_stream(torch.cuda.current_stream())
        # autocast's cache of cast weights would hand the training step tensors from the graph's memory
        autocast = torch.autocast("cuda", torch.get_autocast_dtype("cuda"), torch.is_autocast_enabled("cuda"),
                                  cache_enabled=False)
        with torch.cuda.stream(stream), autocast:
            model.step_probs(enc, self.state, self.ids)  # warm-up off the graph: lazy initialisation, cuBLAS workspaces
            # capture_begin, not the `torch.cuda.graph` context, which empties the allocator's cache at every capture
            latest = _LATEST_GRAPH.get(enc.src_ext.device)
            pool = torch.cuda.graph_pool_handle() if latest is None else latest.pool()
            self.graph.capture_begin(pool, capture_error_mode="thread_local")
            try:
                self.probs, state, _ = model.step_probs(enc, self.state, self.ids)
                for static, new in zip(vars(self.state).values(), vars(state).values()):
                    static.copy_(new)
            finally:
                self.graph.capture_end()
        torch.cuda.current_stream().wait_stream(stream)
        _LATEST_GRAPH[enc.src_ext.device] = self.graph

    def __call__(self, ids: Tensor) -> Tensor:
        self.ids.copy_(ids)
        self.graph.replay()
        return self.probs


def _decode(model: Summarizer, enc: Encoded, max_len: int, choose: Chooser,
            processors: Sequence[StepProcessor]) -> Decoded:
    """Run the decoder, picking each next token with `choose`. On a CPU, rows that have ended leave the batch that the
    decoder runs on once they are `SHRINK_AT` of it, and the loop stops at the step where the last row ends. Where the
    step is launch-bound the batch stays whole and the loop looks every `CHECK_EVERY_LAUNCH_BOUND` steps; on CUDA,
    without gradient, the step is a `CapturedStep`. The tokens are the same."""
    cfg = model.config
    B, device = enc.src_ext.size(0), enc.src_ext.device
    shrink, check_every = (False, CHECK_EVERY_LAUNCH_BOUND) if launch_bound(device) else (True, 1)
    captured = not shrink and device.type == "cuda" and CUDA_GRAPHS and not torch.is_grad_enabled()
    step = CapturedStep(model, enc) if captured else Step(model, enc)
    live = torch.arange(B, device=device)  # the batch rows that `step`, `ids` and `done` hold, in order
    ids = torch.full((B,), cfg.bos_id, dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    history = torch.zeros(B, 0, dtype=torch.long, device=device)
    for t in range(max_len):
        probs = step(ids)
        for process in processors:
            process(probs, history[live], 0.0)
        ids = choose(probs, live, B)
        step_ids = ids.new_full((B,), cfg.pad_id).index_put_((live,), ids.masked_fill(done, cfg.pad_id))
        history = torch.cat([history, step_ids.unsqueeze(1)], 1)
        done = done | (ids == cfg.eos_id)
        if (t + 1) % check_every:
            continue
        n_done = int(done.sum())
        if n_done == len(live):
            break
        if shrink and n_done >= SHRINK_AT * len(live):
            keep = (~done).nonzero().squeeze(1)
            step.keep(keep)
            ids, live, done = ids[keep], live[keep], done[keep]
    return Decoded(history, (history != cfg.pad_id).sum(1)).select(slice(None))  # without steps after every row's end


def sample_categorical(probs: Tensor, generator: torch.Generator | None = None,
                       uniform: Tensor | None = None) -> Tensor:
    """One draw per row of `probs` [B, X] (non-negative, rows need not sum to 1) by inverse CDF: one uniform
    per row (`uniform` [B, 1], else drawn here; torch.multinomial draws one exponential per entry, a large share of a
    decoding step on CPU)."""
    cdf = probs.cumsum(-1)
    if uniform is None:
        uniform = torch.rand(probs.size(0), 1, generator=generator, device=probs.device, dtype=cdf.dtype)
    # the first entry whose cdf exceeds u: zero-probability entries (cdf unchanged) are never drawn
    return torch.searchsorted(cdf, uniform * cdf[:, -1:], right=True).squeeze(1).clamp(max=probs.size(-1) - 1)


def _multinomial(generator: torch.Generator | None, temperature: float = 1.0) -> Chooser:
    """Draws from p^(1/temperature), renormalised (`sample_categorical` needs no normalised rows). Each step draws a
    uniform for every row of the batch, decoding or ended, so a row's draws do not depend on when others end."""
    if temperature <= 0:
        raise ValueError(f"the sampling temperature must be positive, got {temperature}")

    def choose(probs: Tensor, rows: Tensor, n_rows: int) -> Tensor:
        uniform = torch.rand(n_rows, 1, generator=generator, device=probs.device, dtype=probs.dtype)[rows]
        if temperature != 1.0:  # divided by the row's max first, so that a small τ cannot underflow every entry to 0
            probs = (probs / probs.amax(-1, keepdim=True)) ** (1 / temperature)
        return sample_categorical(probs, uniform=uniform)
    return choose


def _argmax(probs: Tensor, rows: Tensor, n_rows: int) -> Tensor:
    return probs.argmax(-1)


def greedy(model: Summarizer, enc: Encoded, max_len: int = 100,
           processors: Sequence[StepProcessor] = ()) -> Decoded:
    """Argmax decoding; runs under the caller's grad mode."""
    return _decode(model, enc, max_len, _argmax, _processors(model, processors))


def rollout_rows(n_articles: int, samples: int, with_greedy: bool) -> list[int]:
    """The article behind each row of `sample_and_greedy`: article i's draws at rows i·k … i·k + k − 1, then
    (with the greedy baseline) its greedy decode at row n·k + i."""
    rows = [i for i in range(n_articles) for _ in range(samples)]
    return rows + list(range(n_articles)) if with_greedy else rows


def sample_and_greedy(model: Summarizer, enc: Encoded, max_len: int = 100,
                      generator: torch.Generator | None = None, samples: int = 1, with_greedy: bool = True,
                      processors: Sequence[StepProcessor] = (), temperature: float = 1.0) -> Decoded:
    """`samples` draws ŷ per article and, `with_greedy`, the greedy baseline ỹ, in one decode without gradient
    (self-critical training re-scores ŷ with `model.teacher_forced`); rows as `rollout_rows` lays them out.
    Dropout follows the model's train/eval mode, which the caller sets; in train mode the greedy rows differ
    from `greedy` in eval mode."""
    B = enc.src_ext.size(0)
    n_drawn = B * samples
    sampler = _multinomial(generator, temperature)
    rows = torch.tensor(rollout_rows(B, samples, with_greedy), device=enc.src_ext.device)

    def choose(probs: Tensor, live: Tensor, n_rows: int) -> Tensor:
        # the rows still decoding are in order, draws first, then greedy rows; counted only once some have left
        drawn = n_drawn if len(live) == n_rows else int((live < n_drawn).sum())
        return torch.cat([sampler(probs[:drawn], live[:drawn], n_drawn), _argmax(probs[drawn:], live[drawn:], n_rows)])
    with torch.no_grad():
        return _decode(model, enc.index_select(rows), max_len, choose, _processors(model, processors))


@torch.no_grad()
def beam_search(model: Summarizer, enc: Encoded, beam_size: int = 4, max_len: int = 100,
                length_penalty: float = 1.0, processors: Sequence[StepProcessor] = ()) -> Decoded:
    """Beam search batched over examples and beams, as in See et al.: each step ranks the top 2K extensions
    of the K live hypotheses; those ending in </s> (ranked above the K-th live one) are finished, the first
    K others live on. An example stops once it has K finished hypotheses. The result is the finished
    hypothesis (or, if none, the best live one at `max_len`) with the best score / length ** length_penalty.
    `processors` are the rules on the next token (`MinLength`, `BlockRepeatedTrigrams`, ...), applied in order.
    On a CPU, examples that have stopped leave the batch once they are `SHRINK_AT` of it, as in `_decode`."""
    cfg, K = model.config, beam_size
    processors = _processors(model, processors)
    B, device = enc.src_ext.size(0), enc.src_ext.device
    shrink = not launch_bound(device)
    enc = enc.index_select(torch.arange(B, device=device).repeat_interleave(K))
    state = model.initial_state(enc)
    ninf = float("-inf")
    result = torch.full((B, max_len), cfg.pad_id, dtype=torch.long, device=device)  # filled as examples leave
    live = torch.arange(B, device=device)  # the examples still in the batch, in order; the tensors below hold them
    scores = torch.full((B, K), ninf, device=device)
    scores[:, 0] = 0.0  # one live hypothesis at first, so the K beams don't start as copies
    history = torch.zeros(B * K, 0, dtype=torch.long, device=device)
    best = torch.full((B,), ninf, device=device)
    best_ids = torch.full((B, max_len), cfg.pad_id, dtype=torch.long, device=device)
    n_finished = torch.zeros(B, dtype=torch.long, device=device)
    ids = torch.full((B * K,), cfg.bos_id, dtype=torch.long, device=device)
    rank = torch.arange(2 * K, device=device)
    for t in range(max_len):
        n = len(live)
        log_probs, state, _ = model.step(enc, state, ids)
        for process in processors:
            process(log_probs, history, ninf)
        X = log_probs.size(-1)
        top, flat = (scores.view(-1, 1) + log_probs).view(n, K * X).topk(2 * K, -1)
        token = flat % X
        beam = torch.arange(n, device=device).unsqueeze(1) * K + flat // X  # [n, 2K] rows of parents
        cand = torch.cat([history[beam], token.unsqueeze(-1)], -1)  # [n, 2K, t + 1]

        is_eos = token == cfg.eos_id
        live_before = (~is_eos).cumsum(-1) - (~is_eos).long()
        finished = is_eos & (live_before < K) & top.isfinite()
        norm = (top / (t + 1) ** length_penalty).masked_fill(~finished, ninf)
        norm, j = norm.max(-1)
        better = norm > best
        best = torch.where(better, norm, best)
        pick = torch.arange(n, device=device)
        best_ids[:, : t + 1] = torch.where(better.unsqueeze(1), cand[pick, j], best_ids[:, : t + 1])
        n_finished += finished.sum(-1)

        keep = (is_eos.long() * 2 * K + rank).argsort(-1)[:, :K]  # first K candidates not ending in </s>
        stopped = n_finished >= K
        scores = top.gather(1, keep).masked_fill(stopped.unsqueeze(1), ninf)
        rows = beam.gather(1, keep).view(-1)
        keep_hist = keep.unsqueeze(-1).expand(-1, -1, t + 1)
        history = cand.gather(1, keep_hist).view(n * K, t + 1)
        ids = token.gather(1, keep).view(-1)
        n_stopped = int(stopped.sum())
        if n_stopped == n:
            break
        if shrink and n_stopped >= SHRINK_AT * n:  # the stopped examples' results are final: they leave
            result[live[stopped]] = best_ids[stopped]
            going = (~stopped).nonzero().squeeze(1)
            live, scores, best, best_ids, n_finished = (x[going] for x in (live, scores, best, best_ids, n_finished))
            going_rows = (going.unsqueeze(1) * K + torch.arange(K, device=device)).view(-1)
            history, ids, rows = history[going_rows], ids[going_rows], rows.view(n, K)[going].view(-1)
            enc = enc.index_select(going_rows)
        state = state.index_select(rows)
    else:  # reached max_len: examples without a finished hypothesis take their best live one
        none = best == ninf
        best_ids = torch.where(none.unsqueeze(1), history.view(len(live), K, -1)[:, 0], best_ids)
    result[live] = best_ids
    lengths = (result != cfg.pad_id).sum(1)
    return Decoded(result, lengths).select(slice(None))  # trimmed to the longest result


def check_beam_settings(**settings: Any) -> dict[str, Any]:
    """Raise if `beam_search(model, batch, **settings)` would fail or could not end a summary: call it when a
    run is built, as the test-time decode comes only after training. Unknown names are a TypeError. Returns the
    settings with `beam_search`'s defaults filled in."""
    bound = inspect.signature(beam_search).bind(None, None, **settings)  # None, None: the model and the articles
    bound.apply_defaults()
    beam_size, max_len, processors = (bound.arguments[name] for name in ("beam_size", "max_len", "processors"))
    if beam_size < 1:
        raise ValueError(f"beam search: beam_size must be at least 1, got {beam_size}")
    if max_len < 1:
        raise ValueError(f"beam search: max_len must be at least 1, got {max_len}")
    for processor in processors:
        processor.check(max_len)
    return dict(list(bound.arguments.items())[2:])  # without the model and the articles
