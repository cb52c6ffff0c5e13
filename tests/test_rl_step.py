"""The self-critical step's speed work: the timing seam, and gradient equivalence of each faster path with the path
it replaced (fp32, a fixed batch, to 1e-5)."""
import torch

from test_rl import tiny_module
from trainer.module import StepTimer


def test_step_timer_sees_each_section_of_a_mixed_step():
    module, batch = tiny_module()
    module.timer = timer = StepTimer(torch.device("cpu"))
    with timer("step"):
        module.training_step(batch, 0).backward()
    assert set(timer.seconds) == {"step", "encode", "decode", "reward", "rescore", "mle"}
    assert sum(v for k, v in timer.seconds.items() if k != "step") <= timer.seconds["step"]
