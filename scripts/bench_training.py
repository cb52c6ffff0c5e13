"""Benchmark one MLE training step (forward + backward + Adam) of the pointer-generator at See et al. sizes
on real CNN/DM articles: median step time, examples/s and peak memory.

    python scripts/bench_training.py [--device cpu|cuda] [--steps 10] [--batch-size 16] [--coverage] [--long-targets]

Measured on 2 CPU threads (2026-11), behind choices in models/: PyTorch's packed-sequence LSTM ~10x slower than the
encoder's plain calls; torch's CPU sigmoid ~6x faster than its tanh (the attention's 2·v·σ(2z) − Σv form);
torch.multinomial 22 ms for 16 x 50k rows, a third of a decoding step (hence decoding.sample_categorical).
"""
from __future__ import annotations

import os

# Sleeping, not spinning, OpenMP workers: on a shared machine, spinning threads made steps 2-20x slower whenever
# another process held a core. Set OMP_WAIT_POLICY yourself to override.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import resource
import statistics
import time
from itertools import islice
from pathlib import Path
from typing import Iterator

import torch

from models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from models.text.batch import Example, collate
from models.text.records import jsonl_rows
from models.text.vocab import Vocabulary, tokenize_sentences
from trainer.host_memory import keep_freed_memory

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "cnndm_see2017_test.jsonl"


def read_examples(path: Path, limit: int | None = None) -> Iterator[Example]:
    """The first `limit` rows (all by default) as examples: article tokens flattened, highlights as sentences."""
    for row in islice(jsonl_rows(path), limit):
        source = [t for s in tokenize_sentences(row.text("article"), pretokenized=True) for t in s]
        yield Example(row.text("id"), source, tokenize_sentences(row.text("highlights"), pretokenized=True))


def build_vocab(path: Path, size: int) -> Vocabulary:
    """Vocabulary over every article and highlight of the file, streamed (tokens are not kept)."""
    return Vocabulary.build((ex.source + [t for s in ex.reference for t in s] for ex in read_examples(path)), size)


def see_et_al_setup(parser: argparse.ArgumentParser, steps: int) -> tuple[argparse.Namespace, torch.device, Vocabulary]:
    """The flags both step benchmarks share, parsed; threads and seed set; the 50k vocabulary of the data."""
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=steps, help="timed steps (after the warm-up)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--return-freed-memory", action="store_true",
                        help="glibc's default allocator settings, not those training runs with (keep_freed_memory=false)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.host_memory = ("freed memory kept" if not args.return_freed_memory and keep_freed_memory()
                        else "glibc's allocator defaults")
    torch.manual_seed(0)
    return args, torch.device(args.device), build_vocab(args.data, 50_000)


def peak_memory_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux reports KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--coverage", action="store_true")
    parser.add_argument("--long-targets", action="store_true",
                        help="only articles whose highlights reach 100 tokens: every step decodes 100 tokens")
    args, device, vocab = see_et_al_setup(parser, steps=10)
    n_steps = args.warmup + args.steps
    min_target = 100 if args.long_targets else 0
    examples = list(islice((ex for ex in read_examples(args.data) if sum(map(len, ex.reference)) >= min_target),
                           n_steps * args.batch_size))
    batches = [collate(examples[i * args.batch_size:(i + 1) * args.batch_size], vocab, 400, 100)
               for i in range(n_steps)]
    config = PointerGeneratorConfig(vocab_size=len(vocab), emb_dim=128, hidden_dim=256, coverage=args.coverage)
    model = PointerGenerator(config).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    rss_before = peak_memory_gib(torch.device("cpu"))

    times = []
    for i, batch in enumerate(batches):
        batch = batch.to(device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        loss = model.mle_loss(batch)["loss"]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= args.warmup:
            times.append(time.perf_counter() - start)

    median = statistics.median(times)
    target_lens = [b.target.size(1) for b in batches[args.warmup:]]
    print(f"MLE step, pointer-generator{' + coverage' if args.coverage else ''}: batch {args.batch_size}, "
          f"source {max(b.src.size(1) for b in batches)}, target {min(target_lens)}-{max(target_lens)} "
          f"(batch max), hidden 256, emb 128, vocab {len(vocab)}, {args.threads} threads "
          f"(OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}), {args.device}, {args.host_memory}")
    print(f"{'median step (s)':<24}{median:>10.3f}")
    print(f"{'min / max step (s)':<24}{min(times):>5.2f} / {max(times):.2f}")
    print(f"{'examples / s':<24}{args.batch_size / median:>10.2f}")
    print(f"{'peak memory (GiB)':<24}{peak_memory_gib(device):>10.2f}"
          f"   ({'CUDA max allocated' if device.type == 'cuda' else 'max RSS'};"
          f" RSS before training {rss_before:.2f} GiB)")
    print(f"{'load average (1 min)':<24}{os.getloadavg()[0]:>10.2f}   (other processes on the machine inflate timings)")


if __name__ == "__main__":
    main()
