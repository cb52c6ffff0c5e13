"""The self-critical step's speed work: the timing seam, and equivalence of each faster path with the path it replaced
(the same decodes; the same gradient in fp32 on a fixed batch, to 1e-5)."""
import os
import random
import subprocess
import sys
from unittest.mock import patch

import pytest
import torch

from models import decoding, pointer_generator
from models.decoding import BlockRepeatedTrigrams, MinLength, greedy
from models.pointer_generator import DecoderState, EncoderOutput
from models.text.batch import Batch, Example, collate
from models.text.vocab import Vocabulary
from rewards.qa import MASK, ExtractiveQA
from test_decoding import recorded_setting
from test_rl import tiny_module
from trainer.objectives import SelfCritical, decoder_inputs
from trainer.timing import StepTimer

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))]


def test_step_timer_sees_each_section_of_a_mixed_step():
    module, batch = tiny_module()
    module.timer = timer = StepTimer(torch.device("cpu"))
    with timer("step"):
        module.training_step(batch, 0).backward()
    assert set(timer.seconds) == {"step", "encode", "decode", "reward", "forced"}  # τ = 1: one teacher-forced pass
    assert sum(v for k, v in timer.seconds.items() if k != "step") <= timer.seconds["step"]


def test_greedy_rows_that_leave_the_batch_decode_as_they_would_alone():
    """Shrinking the batch as rows end changes no decode: batched greedy (with processors that read each row's
    history) equals each article decoded on its own, where no other row ever ends."""
    model, batch = recorded_setting(coverage=False)
    processors = [BlockRepeatedTrigrams(), MinLength(5, model.config.eos_id)]  # rows end at 7 to 13 tokens
    shrinks = []  # rows of each EncoderOutput.index_select call: the batch shrinking
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


@pytest.mark.parametrize("max_len", [12, 20])  # 12: the beam reaches it, some examples unfinished
def test_beam_examples_that_leave_the_batch_decode_as_they_would_alone(max_len):
    """Examples whose K hypotheses have finished leave the beam's batch on a CPU; each result is still the one the
    example gets decoded alone, where no other example ever leaves."""
    model, batch = recorded_setting(coverage=False)
    processors = [BlockRepeatedTrigrams(), MinLength(3, model.config.eos_id)]
    shrinks = []  # rows of each EncoderOutput.index_select call: the first repeats rows for the beams
    with torch.no_grad():
        enc = model.encode(batch)
        select = type(enc).index_select
        with patch.object(type(enc), "index_select", lambda self, index: shrinks.append(len(index)) or
                          select(self, index)):
            batched = decoding.beam_search(model, enc, 3, max_len, processors=processors)
        assert len(shrinks) > 1  # examples did leave the batch
        for i in range(len(batch)):
            alone = decoding.beam_search(model, model.encode(batch.index_select([i])), 3, max_len, processors=processors)
            n = int(alone.lengths[0])
            assert batched.ids[i, :n].tolist() == alone.ids[0, :n].tolist() and batched.lengths[i] == n, i
    assert (batched.lengths == max_len).any() == (max_len == 12)


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


def varied_batch(vocab: Vocabulary, n: int = 6) -> Batch:
    """Articles that differ from one another (a row given another row's article shows), an out-of-vocabulary word to
    copy, and a third of them without a reference."""
    rng = random.Random(0)
    words = "the cat sat on a mat . dog ran zorblax".split()
    examples = [Example(str(i), [rng.choice(words) for _ in range(rng.randint(5, 12))],
                        [[rng.choice(words) for _ in range(rng.randint(2, 6))]] if i % 3 else None) for i in range(n)]
    return collate(examples, vocab)


def mixed_step_gradient(seed: int, samples: int, temperature: float, coverage: bool = False, device: str = "cpu"
                        ) -> tuple[dict[str, torch.Tensor], int]:
    """The parameters' gradient after one mixed step of the tiny module on `varied_batch` (the same weights every
    call, </s> made likelier), drawing with `seed`, and how many times rows of the encoded articles were selected."""
    module, _ = tiny_module(gamma=0.7)
    module.objective.samples, module.objective.temperature, module.objective.rl_max_len = samples, temperature, 30
    module.model.config.coverage = coverage
    module.model.w_c.requires_grad_(coverage)
    with torch.no_grad():  # rows end at different steps
        module.model.out_vocab.bias[module.vocab.eos_id] += 1.5
        module.model.w_c.fill_(0.3 if coverage else 0.0)  # coverage that changes the attention
    module.to(device)
    batch = varied_batch(module.vocab).to(device)
    selects = []  # the index of each EncoderOutput.index_select call (rows, or a slice of them)
    select = EncoderOutput.index_select
    with patch.object(EncoderOutput, "index_select", lambda self, index: selects.append(index) or
                      select(self, index)):
        torch.manual_seed(seed)
        module.training_step(batch, 0).backward()
    return {name: p.grad for name, p in module.model.named_parameters() if p.grad is not None}, len(selects)


@pytest.mark.parametrize("samples, temperature", [(1, 1.0), (3, 1.0), (2, 0.5)])
def test_rows_leaving_the_decode_leave_the_mixed_steps_gradient_as_it_was(samples, temperature):
    """The mixed step's gradient when ended rows leave the decode equals the gradient when every row decodes to
    the end (the path before), in fp32 to 1e-5: same draws, same greedy rows, same rescoring."""
    shrank = False
    for seed in range(3):
        shrunk, selects = mixed_step_gradient(seed, samples, temperature)
        with patch.object(decoding, "SHRINK_AT", 2.0):  # never: every row decodes to the batch's longest
            whole, selects_before = mixed_step_gradient(seed, samples, temperature)
        assert any(g.abs().sum() > 0 for g in whole.values())
        shrank |= selects > selects_before
        assert shrunk.keys() == whole.keys()
        for name, grad in whole.items():
            torch.testing.assert_close(shrunk[name], grad, atol=1e-5, rtol=1e-5, msg=f"seed {seed}: {name}")
    assert shrank  # some decode did shrink


def two_teacher_forced_passes(self, model, vocab, batch, enc, sampled, sample_rows, timer):
    """The path before: the references' own teacher-forced pass, then the samples'."""
    mle = model.mle_loss(batch, enc=enc)
    sample_enc = enc.index_select(torch.tensor(sample_rows, device=batch.device))
    return mle, model.teacher_forced(sample_enc, decoder_inputs(sampled.ids, vocab), sampled.ids).log_probs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("samples, coverage", [(1, False), (3, False), (2, True)])
def test_one_teacher_forced_pass_over_references_and_samples_leaves_the_gradient_as_two(samples, coverage, device):
    """At τ = 1 the mixed step runs the references and the samples through one teacher-forced pass (rows padded to
    the longer of the two); its gradient equals that of the two passes, in fp32 to 1e-5."""
    for seed in range(3):
        together, _ = mixed_step_gradient(seed, samples, 1.0, coverage, device)
        with patch.object(SelfCritical, "teacher_forced", two_teacher_forced_passes):
            apart, _ = mixed_step_gradient(seed, samples, 1.0, coverage, device)
        assert together.keys() == apart.keys() and ("w_c" in apart) == coverage
        for name, grad in apart.items():
            assert grad.abs().sum() > 0, name
            torch.testing.assert_close(together[name], grad, atol=1e-5, rtol=1e-5, msg=f"seed {seed}: {name}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("samples, temperature", [(1, 1.0), (3, 0.7)])
def test_a_launch_bound_decode_keeps_its_batch_whole_and_writes_the_same_tokens(samples, temperature, device):
    """Where the step is launch-bound (a GPU) the decode neither shrinks its batch nor looks at every step which rows
    have ended: the samples and greedy rows are the CPU path's, token for token, with no columns after every end."""
    model, batch = recorded_setting(coverage=False)
    model, batch = model.to(device), batch.to(device)
    with torch.no_grad():
        model.out_vocab.bias[model.config.eos_id] += 1.0  # rows end at different steps, some before the limit
        enc = model.encode(batch)

    def decode(bound: bool):
        selects = []
        select = type(enc).index_select
        with patch.object(decoding, "launch_bound", lambda device: bound), patch.object(
                type(enc), "index_select", lambda self, index: selects.append(len(index)) or select(self, index)):
            out = decoding.sample_and_greedy(model, enc, 30, torch.Generator(device).manual_seed(0), samples,
                                             temperature=temperature)
        return out, len(selects)

    (cpu, cpu_selects), (gpu, gpu_selects) = decode(False), decode(True)
    assert gpu_selects == 1 < cpu_selects  # only the rows' layout: the whole batch decodes to the end
    assert len(set(cpu.lengths.tolist())) > 1 and int(cpu.lengths.max()) < 30
    assert gpu.ids.shape == cpu.ids.shape and torch.equal(gpu.ids, cpu.ids) and torch.equal(gpu.lengths, cpu.lengths)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("coverage, samples, temperature, bf16", [(False, 1, 1.0, False), (True, 3, 0.7, False),
                                                                  (False, 2, 1.0, True)])
def test_a_cuda_decode_replayed_from_a_graph_writes_the_eager_loops_tokens(coverage, samples, temperature, bf16):
    """On CUDA each decoder step is replayed from one captured graph (`decoding.CapturedStep`): the samples, the greedy
    rows and `greedy` are the eager loop's, token for token, with rows ending at different steps, under bf16 autocast
    too (as trainer=gpu decodes), with 1 or 2 decoder layers and coverage."""
    model, batch = recorded_setting(coverage)  # coverage: 2 decoder layers
    model, batch = model.cuda(), batch.to("cuda")
    with torch.no_grad():
        model.out_vocab.bias[model.config.eos_id] += 1.0
        enc = model.encode(batch)
    captured = []

    class CountedStep(decoding.CapturedStep):
        def __init__(self, *args):
            captured.append(1)
            super().__init__(*args)

    def decode(graphs: bool) -> list[decoding.Decoded]:
        with patch.object(decoding, "CUDA_GRAPHS", graphs), patch.object(decoding, "CapturedStep", CountedStep), \
                torch.autocast("cuda", torch.bfloat16, enabled=bf16), torch.no_grad():
            return [decoding.sample_and_greedy(model, enc, 30, torch.Generator("cuda").manual_seed(0), samples,
                                               temperature=temperature), greedy(model, enc, 30)]

    eager = decode(False)
    assert not captured
    replayed = decode(True)
    assert len(captured) == 2
    assert len(set(eager[0].lengths.tolist())) > 1 and int(eager[0].lengths.min()) < 30
    for a, b in zip(eager, replayed):
        assert torch.equal(a.ids, b.ids) and torch.equal(a.lengths, b.lengths)


@pytest.mark.parametrize("setting, expected", [(None, True), ("1", True), ("0", False)])
def test_the_environment_can_keep_the_eager_decode_loop(setting, expected):
    env = {k: v for k, v in os.environ.items() if k != "SUMRL_CUDA_GRAPHS"} | ({} if setting is None else
                                                                              {"SUMRL_CUDA_GRAPHS": setting})
    out = subprocess.run([sys.executable, "-c", "import models.decoding as d; print(d.CUDA_GRAPHS)"], env=env,
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(expected)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_captured_decodes_reuse_one_memory_pool():
    """Each decode captures its own graph; they share one pool, so the memory a finished decode's graph held serves
    the next one instead of piling up."""
    model, batch = recorded_setting(coverage=False)
    model, batch = model.cuda(), batch.to("cuda")
    with torch.no_grad():
        enc = model.encode(batch)
        reserved = []
        for _ in range(12):
            decoding.greedy(model, enc, 30)
            reserved.append(torch.cuda.memory_reserved())
    assert reserved[-1] == reserved[2]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("samples, temperature, coverage", [(1, 1.0, False), (3, 1.0, True), (2, 0.5, True)])
def test_rows_that_end_leave_the_teacher_forced_pass_and_the_gradient_as_it_was(samples, temperature, coverage, device):
    """Where the step costs arithmetic (a CPU) each row of the teacher-forced pass stops at its own end; the mixed
    step's gradient equals that of every row running to the batch's width (the path before, and a GPU's), in fp32 to
    1e-5, with rows of many lengths (references, samples, rows without a reference)."""
    for seed in range(3):
        with patch.object(pointer_generator, "launch_bound", lambda device: False):
            stopping, _ = mixed_step_gradient(seed, samples, temperature, coverage, device)
        with patch.object(pointer_generator, "launch_bound", lambda device: True):
            whole, _ = mixed_step_gradient(seed, samples, temperature, coverage, device)
        assert stopping.keys() == whole.keys() and ("w_c" in whole) == coverage
        for name, grad in whole.items():
            assert grad.abs().sum() > 0, name
            torch.testing.assert_close(stopping[name], grad, atol=1e-5, rtol=1e-5, msg=f"seed {seed}: {name}")


def test_repeated_rows_of_an_encoding_add_their_gradients_in_one_order_at_any_thread_count():
    """The mixed step reads each article's encoding in 1 + k rows (its reference and its samples). Backward adds the
    rows' gradients up: the same bits at 2 threads every time, and the same as at 1 thread (where the sum was always
    in order). Advanced indexing added them with atomics across threads, so at 2 threads each run got another
    gradient and, steps later, another model."""
    B, S, D, k = 16, 105, 192, 4  # large enough for torch to spread the adds over threads
    gen = torch.Generator().manual_seed(0)
    outputs = torch.randn(B, S, D, generator=gen, requires_grad=True)
    init = DecoderState(torch.randn(1, B, 8, generator=gen), torch.randn(1, B, 8, generator=gen),
                        torch.randn(B, D, generator=gen), torch.zeros(B, S))
    rows = torch.tensor(list(range(B)) + [i for i in range(B) for _ in range(k)])
    upstream = torch.randn(len(rows), S, D, generator=gen)

    def gradient(threads: int) -> torch.Tensor:
        torch.set_num_threads(threads)
        outputs.grad = None
        mask, src_ext = torch.ones(B, S, dtype=torch.bool), torch.zeros(B, S, dtype=torch.long)
        enc = EncoderOutput(outputs, 2 * outputs, mask, src_ext, 0, init).index_select(rows)
        ((enc.outputs + enc.features) * upstream).sum().backward()
        return outputs.grad.clone()

    before = torch.get_num_threads()
    try:
        in_order = gradient(1)
        at_two = [gradient(2) for _ in range(8)]
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(grad, in_order) for grad in at_two)
