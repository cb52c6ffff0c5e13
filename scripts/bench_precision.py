"""fp32 against bf16 autocast (`trainer.precision`), measured in one run, steps interleaved: the MLE step, a mixed
step with one reward, and the test's beam decode, at the news grid's sizes (experiment=cnndm_sample_grid: hidden 128,
embeddings 64, vocabulary 20k, batch 16, sources 400, targets 100; beam 5, at least 35 tokens, trigram blocking).

    python scripts/bench_precision.py [--threads 1] [--steps 6] [--reward rouge_l] [--eos-bias 6]

An untrained model whose </s> logit gets `--eos-bias` (samples end, as a trained model's do). Prints, per part, the
median seconds at each precision and their ratio; the cores must be idle for the ratio to mean anything.
"""
from __future__ import annotations

import argparse
import statistics
import time
from functools import partial
from pathlib import Path

import torch

from bench_training import DATA, build_vocab, read_examples
from models.decoding import BlockRepeatedTrigrams, MinLength, beam_search
from models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from models.text.batch import collate
from rewards.configs import compose_rewards
from trainer.module import SummarizationModule
from trainer.objectives import objective_for
from trainer.precision import native_bf16
from trainer.schedules import Constant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="per run, as the grid's runs go side by side")
    parser.add_argument("--steps", type=int, default=6, help="timed batches (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--reward", default="rouge_l")
    parser.add_argument("--eos-bias", type=float, default=6.0)
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device, vocab = torch.device(args.device), build_vocab(args.data, 20_000)
    n = args.warmup + args.steps
    examples = list(read_examples(args.data, 16 * n))
    batches = [collate(examples[i * 16:(i + 1) * 16], vocab, 400, 100).to(device) for i in range(n)]
    model = PointerGenerator(PointerGeneratorConfig(vocab_size=len(vocab), emb_dim=64, hidden_dim=128)).to(device)
    with torch.no_grad():
        model.out_vocab.bias[model.config.eos_id] += args.eos_bias
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-6)  # small: the model stays as it is

    def module(reward=None) -> SummarizationModule:
        built = SummarizationModule(model, vocab, optimizer=None, objective=partial(
            objective_for, reward, gamma=Constant(0.9984), rl_max_len=100, temperature=0.3,
            processors={"block_trigrams": BlockRepeatedTrigrams()})).to(device)
        built.log = lambda *a, **k: None
        return built

    def train_step(trained: SummarizationModule, batch, bf16: bool) -> None:
        with torch.autocast(device.type, torch.bfloat16, enabled=bf16):  # as Lightning's bf16-mixed runs a step
            loss = trained.training_step(batch, 0)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def beam(batch, bf16: bool) -> None:
        with torch.no_grad(), torch.autocast(device.type, torch.bfloat16, enabled=bf16):
            beam_search(model, model.encode(batch), beam_size=5, max_len=100,
                        processors=[MinLength(35), BlockRepeatedTrigrams()])

    mle, mixed = module(), module(compose_rewards([args.reward], [])[args.reward])
    parts = {"MLE step": partial(train_step, mle), f"mixed step, {args.reward}": partial(train_step, mixed),
             "beam decode (test)": beam}
    print(f"{args.device}, {args.threads} threads, {native_bf16()[1]}; batch 16, hidden 128, emb 64, vocab "
          f"{len(vocab)}; median of {args.steps} after {args.warmup} of warm-up, fp32 and bf16 alternating\n"
          f"| part | fp32 (s) | bf16 (s) | fp32 / bf16 |\n|---|---|---|---|")
    for name, run in parts.items():
        seconds: dict[bool, list[float]] = {False: [], True: []}
        for i, batch in enumerate(batches):
            for bf16 in (False, True):
                start = time.perf_counter()
                run(batch, bf16)
                if i >= args.warmup:
                    seconds[bf16].append(time.perf_counter() - start)
        fp32, bf16 = statistics.median(seconds[False]), statistics.median(seconds[True])
        print(f"| {name} | {fp32:.3f} | {bf16:.3f} | {fp32 / bf16:.2f} |", flush=True)


if __name__ == "__main__":
    main()
