"""Reward throughput: the batched rewards vs the plain per-pair way, on the same CNN/DM pairs.

Pairs are See et al.'s pointer-generator summaries and the reference highlights of the first
`--pairs` test articles. "Ours" is timed on the reward call only (inputs, vocabulary and id tables
are built before, as in training; that one-off setup is reported apart). "Per pair" goes from text:
rouge-score for ROUGE-L; Python bags, ot.dist(metric="euclidean") and ot.emd2 for the movers.
Pairs/s are given by wall clock and by this process's CPU time (fairer on a shared machine), each the
median of `--repeats` runs of both ways.
Torch runs on one thread by default, like the per-pair way: the rewards' ops are tiny, and on
cores shared with other jobs torch's intra-op threads made them 20-40x slower (spinning workers).

    python scripts/bench_rewards.py [--pairs 1024] [--batch-size 64] [--threads 1] [--alternatives]
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import ot
import torch
from rouge_score import rouge_scorer

from rewards.base import RewardInput
from rewards.embeddings import STOPWORDS, GloveEmbeddings, WordVectors
from rewards.mover import (SentenceMoverSimilarity, SentenceWordMoverSimilarity, WordMoverSimilarity,
                           build_bag, euclidean)
from rewards.rouge import RougeL
from rewards.transport import batched_emd, emd
from trainer.vocab import Vocabulary, split_at_sentence_ends

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def load_pairs(data: Path, n: int) -> list[tuple[str, str]]:
    """(pointer-gen summary, reference highlights) texts, one sentence per line, for the first n articles."""
    with open(data / "cnndm_see2017_test.jsonl", encoding="utf-8") as f:
        references = {}
        for line in f:
            row = json.loads(line)
            references[row["id"]] = row["highlights"]
            if len(references) == n:
                break
    with gzip.open(data / "cnndm_see2017_test_system_outputs.jsonl.gz", "rt", encoding="utf-8") as f:
        summaries = {row["id"]: row["pointer_gen"] for row in map(json.loads, f) if row["id"] in references}
    return [(summaries[i], references[i]) for i in references]


class WhitespaceTokenizer:
    def tokenize(self, text: str) -> list[str]:
        return text.split()


def per_pair_mover(hyp_text: str, ref_text: str, glove: WordVectors, word_mass: float) -> float:
    """Clark et al. Eq. 1-5 the plain way: text in, Python bags, POT per pair."""

    def bag(sentences):
        sentences = [[w.lower() for w in s if w.isalpha() and w.lower() not in STOPWORDS and w.lower() in glove.row]
                     for s in sentences]
        sentences = [s for s in sentences if s]
        size = sum(len(s) for s in sentences)
        points, weights = [], []
        if word_mass:
            for word, count in Counter(w for s in sentences for w in s).items():
                points.append(glove.matrix[glove.row[word]])
                weights.append(word_mass * count / size)
        if word_mass < 1:
            for s in sentences:
                points.append(glove.matrix[[glove.row[w] for w in s]].astype(np.float64).mean(0))
                weights.append((1 - word_mass) * len(s) / size)
        return np.array(points, dtype=np.float64), np.array(weights)

    (x, a), (y, b) = bag(split_at_sentence_ends(hyp_text.split())), bag(l.split() for l in ref_text.split("\n"))
    if len(a) == 0 or len(b) == 0:
        return 1.0 if len(a) == len(b) else 0.0
    return math.exp(-ot.emd2(a, b, ot.dist(x, y, metric="euclidean")))


def timed(fn, repeats: int = 1):
    """fn's result, and its median wall-clock and CPU seconds over `repeats` runs."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return out, statistics.median(walls), statistics.median(cpus)


def solve_chunk(problems):
    return [emd(a, b, cost) for a, b, cost in problems]


def sinkhorn_cost(cost: torch.Tensor, a: torch.Tensor, b: torch.Tensor, eps: float, iterations: int) -> torch.Tensor:
    """<P, cost> of the entropic plan P after log-domain Sinkhorn iterations, batched; zero weights
    (padding) get log-weight -inf and so no mass."""
    log_a, log_b = a.log(), b.log()
    f, g = torch.zeros_like(a), torch.zeros_like(b)
    for _ in range(iterations):
        f = -eps * torch.logsumexp(log_b[:, None, :] + (g[:, None, :] - cost) / eps, dim=2)
        g = -eps * torch.logsumexp(log_a[:, :, None] + (f[:, :, None] - cost) / eps, dim=1)
    plan = torch.exp(log_a[:, :, None] + log_b[:, None, :] + (f[:, :, None] + g[:, None, :] - cost) / eps)
    return (plan * cost).sum((1, 2))


def host_problems(reward, inputs: list[RewardInput]) -> tuple[list[tuple], torch.Tensor, list[tuple]]:
    """The reward's device-side problems per batch, their exact distances, and per-pair host arrays."""
    problems = []
    for x in inputs:
        hyp = build_bag(reward.embeddings.embed_batch(x, "hyp"), reward.word_mass, reward.sentence_mass)
        ref = build_bag(reward.embeddings.embed_batch(x, "ref"), reward.word_mass, reward.sentence_mass)
        problems.append((euclidean(hyp[0], ref[0]), hyp[1], ref[1]))
    host = []
    for cost, a, b in problems:
        b = b * (a.sum(1, keepdim=True) / b.sum(1, keepdim=True).clamp(min=1e-300))
        for i in range(len(cost)):
            k, m = int((a[i] > 0).sum()), int((b[i] > 0).sum())
            host.append((a[i, :k].numpy(), b[i, :m].numpy(), cost[i, :k, :m].numpy()))
    return problems, torch.cat([batched_emd(*p) for p in problems]), host


def alternatives(movers: list, inputs: list[RewardInput], per_pair_cpu: dict[str, float]) -> None:
    """The exact solve alone (a ceiling on any speed-up that keeps it), exact EMD in a thread or
    process pool, and batched Sinkhorn against exact."""
    print("\nexact EMD alone (host arrays ready, this process's CPU time)")
    for reward in movers:
        problems, exact, host = host_problems(reward, inputs)
        _, _, cpu = timed(lambda: solve_chunk(host))
        print(f"  {reward.name:8s} {len(host) / cpu:8.0f} pairs/s: at most {per_pair_cpu[reward.name] / cpu:.1f}x "
              f"the per-pair way on one core")
    print(f"solver alternatives on the {reward.name} problems (wall clock)")
    chunks = [host[:len(host) // 2], host[len(host) // 2:]]
    _, wall, _ = timed(lambda: [solve_chunk(c) for c in chunks])
    print(f"  exact, serial            {len(host) / wall:8.0f} pairs/s")
    for name, pool in (("thread pool (2)", ThreadPoolExecutor(2)), ("process pool (2)", ProcessPoolExecutor(2))):
        with pool:
            list(pool.map(solve_chunk, [c[:1] for c in chunks]))  # start the workers
            pooled, wall, _ = timed(lambda: [d for c in pool.map(solve_chunk, chunks) for d in c])
        print(f"  exact, {name:17s} {len(host) / wall:8.0f} pairs/s, "
              f"max |diff| {np.abs(np.array(pooled) - exact.numpy()).max():.1e}")
    nonempty = torch.isfinite(exact) & (exact > 0)  # Sinkhorn has no value for an empty side
    for eps, iterations in ((0.1, 100), (0.01, 200), (0.01, 1000)):
        approx, wall, _ = timed(lambda: torch.cat([sinkhorn_cost(c, a, b, eps, iterations) for c, a, b in problems]))
        approx, exact_cost = approx[nonempty], exact[nonempty]
        error = (torch.exp(-approx) - torch.exp(-exact_cost)).abs()
        print(f"  Sinkhorn eps={eps:<5} x{iterations:<5} {len(host) / wall:8.0f} pairs/s, "
              f"similarity error max {error.max():.1e} mean {error.mean():.1e}, "
              f"cost - exact mean {(approx - exact_cost).mean():+.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="folder of the CNN/DM JSONL files")
    parser.add_argument("--pairs", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--repeats", type=int, default=3, help="timings are medians over this many runs")
    parser.add_argument("--alternatives", action="store_true", help="also measure other EMD solvers")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    pairs = load_pairs(args.data, args.pairs)
    hyps = [h.split() for h, _ in pairs]
    refs = [[line.split() for line in r.split("\n")] for _, r in pairs]
    vocab, vocab_wall, _ = timed(lambda: Vocabulary.build(hyps + [t for r in refs for t in r], 50_000))
    inputs = [RewardInput.from_texts(hyps[i:i + args.batch_size], refs[i:i + args.batch_size], vocab)
              for i in range(0, len(pairs), args.batch_size)]
    glove, load_wall, _ = timed(GloveEmbeddings)
    print(f"{len(pairs)} pairs, batches of {args.batch_size}, torch threads {torch.get_num_threads()}; "
          f"vocabulary ({len(vocab)} words) {vocab_wall:.2f}s, GloVe load {load_wall:.2f}s (once per process)")

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False, tokenizer=WhitespaceTokenizer())
    rewards = [
        (RougeL(), lambda h, r: scorer.score(r, h)["rougeL"].fmeasure),
        (WordMoverSimilarity(glove), lambda h, r: per_pair_mover(h, r, glove.word_vectors, 1.0)),
        (SentenceMoverSimilarity(glove), lambda h, r: per_pair_mover(h, r, glove.word_vectors, 0.0)),
        (SentenceWordMoverSimilarity(glove), lambda h, r: per_pair_mover(h, r, glove.word_vectors, 0.5)),
    ]
    print(f"{'reward':8s} {'ours pairs/s':>21s} {'per-pair pairs/s':>21s} {'ratio':>13s} "
          f"{'max |diff|':>10s} {'setup':>7s}")
    print(f"{'':8s} {'wall':>10s} {'cpu':>10s} {'wall':>10s} {'cpu':>10s} {'wall':>6s} {'cpu':>6s}")
    per_pair_cpu = {}
    for reward, per_pair in rewards:
        _, setup, _ = timed(lambda: reward(inputs[0]))  # builds the vocabulary's id table once
        ours, wall, cpu = timed(lambda: torch.cat([reward(x) for x in inputs]), args.repeats)
        expected, base_wall, base_cpu = timed(lambda: [per_pair(h, r) for h, r in pairs], args.repeats)
        diff = np.abs(ours.double().numpy() - np.array(expected)).max()
        n, per_pair_cpu[reward.name] = len(pairs), base_cpu
        print(f"{reward.name:8s} {n / wall:10.0f} {n / cpu:10.0f} {n / base_wall:10.0f} {n / base_cpu:10.0f} "
              f"{base_wall / wall:6.1f} {base_cpu / cpu:6.1f} {diff:10.1e} {setup:6.2f}s")
    if args.alternatives:
        alternatives([reward for reward, _ in rewards[1:]], inputs, per_pair_cpu)


if __name__ == "__main__":
    main()
