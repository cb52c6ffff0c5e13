"""The model contract (`models.summarizer.Summarizer`): a minimal second model, written against the contract alone,
trains an MLE step and a mixed step in the trainer's module and decodes with greedy, sampling and beam search."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.decoding import beam_search, greedy, sample_and_greedy
from models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from models.summarizer import Summarizer, TeacherForced
from models.text.batch import Example, collate
from models.text.vocab import Vocabulary
from rewards.rouge import RougeL
from trainer.module import SummarizationModule
from trainer.objectives import objective_for
from trainer.schedules import Constant


@dataclass
class TinyConfig:
    vocab_size: int
    hidden: int = 8
    pad_id: int = Vocabulary.pad_id
    unk_id: int = Vocabulary.unk_id
    bos_id: int = Vocabulary.bos_id
    eos_id: int = Vocabulary.eos_id


@dataclass
class Encoding:
    memory: Tensor   # [B, S, H]
    mask: Tensor     # [B, S]
    src_ext: Tensor  # [B, S]
    n_copy_oovs: int

    def index_select(self, index):
        return Encoding(self.memory[index], self.mask[index], self.src_ext[index], self.n_copy_oovs)


@dataclass
class State:
    h: Tensor  # [B, H]

    def index_select(self, index):
        return State(self.h[index])


class GRUCopy(nn.Module):
    """Bag-of-embeddings encoder, a GRU cell decoder, half generating and half copying by dot attention: nothing of
    the pointer-generator's code, only the contract."""

    def __init__(self, config: TinyConfig):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.hidden)
        self.cell = nn.GRUCell(config.hidden, config.hidden)
        self.out = nn.Linear(config.hidden, config.vocab_size)

    def encode(self, batch):
        memory = self.embedding(batch.src)
        return Encoding(memory, batch.src_mask, batch.src_ext, batch.n_copy_oovs)

    def initial_state(self, enc):
        mask = enc.mask.unsqueeze(-1).float()
        return State((enc.memory * mask).sum(1) / mask.sum(1).clamp(min=1))

    def step_probs(self, enc, state, input_ids):
        ids = input_ids.masked_fill(input_ids >= self.config.vocab_size, self.config.unk_id)
        h = self.cell(self.embedding(ids), state.h)
        attn = torch.softmax((enc.memory @ h.unsqueeze(-1)).squeeze(-1).masked_fill(~enc.mask, float("-inf")), -1)
        probs = F.pad(0.5 * torch.softmax(self.out(h), -1), (0, enc.n_copy_oovs))
        return probs.scatter_add(-1, enc.src_ext, 0.5 * attn), State(h), attn

    def step(self, enc, state, input_ids):
        probs, state, attn = self.step_probs(enc, state, input_ids)
        return torch.log(probs + 1e-12), state, attn

    def teacher_forced(self, enc, dec_in, target, temperature=1.0):
        state, log_probs = self.initial_state(enc), []
        for t in range(dec_in.size(1)):
            log_p, state, _ = self.step(enc, state, dec_in[:, t])
            if temperature != 1.0:
                log_p = log_p / temperature
                log_p[:, [self.config.pad_id, self.config.bos_id]] = float("-inf")
                log_p = log_p.log_softmax(-1)
            log_probs.append(log_p.gather(1, target[:, t:t + 1]).squeeze(1))
        real = target != self.config.pad_id
        log_probs = torch.stack(log_probs, 1).masked_fill(~real, 0.0)
        return TeacherForced(log_probs, torch.zeros_like(log_probs))

    def mle_loss(self, batch, enc=None, forced=None):
        tf = forced or self.teacher_forced(enc if enc is not None else self.encode(batch), batch.dec_in, batch.target)
        B, T = batch.target.shape
        mask = batch.target_mask.float()
        nll = -(tf.log_probs[:B, :T] * mask).sum() / mask.sum().clamp(min=1)
        return {"loss": nll, "nll": nll, "coverage": torch.zeros(())}


def tiny_batch():
    vocab = Vocabulary("the cat sat on a mat . dog ran".split())
    examples = [Example(str(i), "the cat sat on the mat . the dog ran .".split(), [["the", "cat", "sat", "."]])
                for i in range(4)]
    return vocab, collate(examples, vocab)


def test_both_models_satisfy_the_contract():
    vocab, _ = tiny_batch()
    assert isinstance(PointerGenerator(PointerGeneratorConfig(vocab_size=len(vocab), emb_dim=4, hidden_dim=4)),
                      Summarizer)
    assert isinstance(GRUCopy(TinyConfig(len(vocab))), Summarizer)


def test_a_second_model_trains_mle_and_mixed_steps_and_decodes():
    vocab, batch = tiny_batch()
    torch.manual_seed(0)
    model = GRUCopy(TinyConfig(len(vocab)))
    for reward in (None, RougeL()):  # the MLE step, then the mixed step
        module = SummarizationModule(model, vocab, optimizer=lambda p: torch.optim.Adam(p),
                                     objective=partial(objective_for, reward, gamma=Constant(0.5), samples=2,
                                                       temperature=0.7, rl_max_len=6))
        module.log = lambda *a, **k: None  # outside a Trainer
        model.zero_grad()
        loss = module.training_step(batch, 0)
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        assert torch.isfinite(loss) and grads and all(torch.isfinite(g).all() for g in grads)
    model.eval()
    with torch.no_grad():
        enc = model.encode(batch)
        for decoded in (greedy(model, enc, max_len=6), beam_search(model, enc, beam_size=3, max_len=6),
                        sample_and_greedy(model, enc, max_len=6, samples=2)):
            assert decoded.ids.size(0) >= batch.src.size(0) and (decoded.lengths <= 6).all()
            assert int(decoded.ids.max()) < len(vocab) + batch.n_copy_oovs
