"""Self-critical training: the loss sign and masking, the no-grad baseline, and the mixed step."""
import torch

from models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from rewards.rouge import RougeL
from trainer.batch import Example, collate
from trainer.module import SummarizationModule, self_critical_loss
from trainer.schedules import Constant
from trainer.vocab import Vocabulary


def test_self_critical_loss_sign_and_eos_mask():
    log_probs = torch.full((2, 4), -1.0, requires_grad=True)
    lengths = torch.tensor([2, 3])  # row 0 ended with </s> at step 1 (counted), row 1 at step 2
    sample_reward, baseline = torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.5])
    loss = self_critical_loss(log_probs, lengths, sample_reward, baseline)
    # −(r(ŷ) − r(ỹ))·Σ_t log p(ŷ_t): by hand, −0.5·(−2) and +0.5·(−3)
    assert torch.allclose(loss, torch.tensor([1.0, -1.5]))
    loss.sum().backward()
    # A sample that beats its baseline gets its log-probability pushed up (negative gradient:
    # descent raises it); one that loses gets pushed down; steps after </s> get no gradient.
    assert torch.equal(log_probs.grad, torch.tensor([[-0.5, -0.5, 0.0, 0.0], [0.5, 0.5, 0.5, 0.0]]))


def test_self_critical_loss_length_normalisation():
    log_probs = torch.full((1, 4), -2.0)
    loss = self_critical_loss(log_probs, torch.tensor([4]), torch.tensor([1.0]), torch.tensor([0.0]),
                              length_normalize=True)
    assert torch.allclose(loss, torch.tensor([2.0]))


def tiny_module(reward=RougeL(), gamma=0.5):
    vocab = Vocabulary("the cat sat on a mat . dog ran".split())
    examples = [Example(str(i), "the cat sat on the mat . the dog ran .".split(),
                        [["the", "cat", "sat", "."]] if i % 3 else None) for i in range(6)]
    batch = collate(examples, vocab)
    torch.manual_seed(0)
    model = PointerGenerator(PointerGeneratorConfig(vocab_size=len(vocab), emb_dim=8, hidden_dim=8))
    module = SummarizationModule(model, vocab, optimizer=lambda p: torch.optim.Adam(p), reward=reward,
                                 gamma=Constant(gamma), rl_max_len=8)
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


def test_examples_without_reference_get_no_reward_based_gradient():
    # γ = 1: only the RL term; with every reference removed a reference-based reward gives zero advantage.
    module, batch = tiny_module(gamma=1.0)
    batch.has_reference[:] = False
    batch.target_mask[:] = False
    loss = module.training_step(batch, 0)
    assert loss.item() == 0.0
