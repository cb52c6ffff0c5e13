"""The self-critical step's speed work: the timing seam, and equivalence of each faster path with the path it replaced
(the same decodes; the same gradient in fp32 on a fixed batch, to 1e-5)."""
from unittest.mock import patch

import torch

from models.decoding import BlockRepeatedTrigrams, MinLength, greedy
from test_decoding import recorded_setting
from test_rl import tiny_module
from trainer.module import StepTimer


def test_step_timer_sees_each_section_of_a_mixed_step():
    module, batch = tiny_module()
    module.timer = timer = StepTimer(torch.device("cpu"))
    with timer("step"):
        module.training_step(batch, 0).backward()
    assert set(timer.seconds) == {"step", "encode", "decode", "reward", "rescore", "mle"}
    assert sum(v for k, v in timer.seconds.items() if k != "step") <= timer.seconds["step"]


def test_greedy_rows_that_leave_the_batch_decode_as_they_would_alone():
    """Shrinking the batch as rows end changes no decode: batched greedy (with processors that read each row's
    history) equals each article decoded on its own, where no other row ever ends."""
    model, batch = recorded_setting(coverage=False)
    processors = [BlockRepeatedTrigrams(), MinLength(5, model.config.eos_id)]  # rows end at 7 to 13 tokens
    shrinks = []
    with torch.no_grad():
        enc = model.encode(batch)
        select = type(enc).index_select
        with patch.object(type(enc), "index_select", lambda self, index: shrinks.append(len(index)) or
                          select(self, index)):
            batched = greedy(model, enc, 20, processors)
        assert shrinks  # rows did leave the batch
        for i in range(len(batch)):
            alone = greedy(model, model.encode(batch.index_select([i])), 20, processors)
            n = int(alone.lengths[0])
            assert batched.ids[i, :n].tolist() == alone.ids[0, :n].tolist() and batched.lengths[i] == n, i
