"""The self-critical step's speed work: the timing seam, and equivalence of each faster path with the path it replaced
(the same decodes; the same gradient in fp32 on a fixed batch, to 1e-5)."""
from unittest.mock import patch

import torch

from models.decoding import BlockRepeatedTrigrams, MinLength, greedy
from rewards.qa import MASK, ExtractiveQA
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


def test_qa_pairs_read_in_order_of_length_score_as_one_padded_pass(tiny_qa_model):
    """Reading pairs sorted by length, each forward padded to its own longest, gives every pair the scores that one
    pass over all pairs in their given order gives."""
    qa = ExtractiveQA(tiny_qa_model)
    questions = [f"He met {MASK} in Berlin .", f"The president of France visited {MASK} on Monday with 300 soldiers .",
                 f"{MASK} said .", f"Police in Paris said the court was in {MASK} yesterday ."] * 2
    contexts = ["angela merkel met the president in berlin .", "the president visited paris .", "police said it .",
                "police in paris said the court was in london yesterday , a report said ."] * 2
    contexts[4:] = reversed(contexts[4:])  # lengths out of order
    answers = ["Angela Merkel", "Paris", "Police", "London"] * 2
    whole = qa._read(questions, contexts, answers, "cpu")  # one forward, in the given order, padded to the longest
    qa.pairs_per_forward = 3
    sorted_chunks = qa.read(questions, contexts, answers)
    for key in whole:
        torch.testing.assert_close(sorted_chunks[key], whole[key], atol=1e-5, rtol=1e-5, msg=key)
    assert len(set(whole["conf"].tolist())) > 2  # the pairs score differently: a mix-up would show
