"""Reward throughput: the batched rewards vs the plain per-pair way, on the same CNN/DM pairs.

Pairs are See et al.'s pointer-generator summaries and the reference highlights of the first
`--pairs` test articles. "Ours" is timed on the reward call only (inputs, vocabulary and id tables
are built before, as in training; that one-off setup is reported apart). "Per pair" goes from text:
rouge-score for ROUGE-L; Python bags, ot.dist(metric="euclidean") and ot.emd2 for the movers; it
runs on one core, as such a loop does. Ours runs twice: on one thread, and on `--threads` (torch's
thread count, all cores by default, as in training: the mover rewards share a batch's pairs among
threads). Pairs/s are wall-clock medians of `--repeats` runs of the three, taken in turn so that
all see the same machine load.

    python scripts/bench_rewards.py [--pairs 1024] [--batch-size 64] [--threads 0] [--repeats 5] [--device cpu] [--alternatives]

Measured with --alternatives on one core (2 CPU cores, 2026-11): rewards.transport's simplex 2.3-2.6x faster than
POT's emd_c on the CNN/DM WMS and S+WMS problems (6-7x on SMS's tiny ones), 2.6-2.8x, 2.1-2.5x and 1.6-1.9x on
random problems of 20, 80 and 320 points a side, equal to 1e-14. Its least-cost start: a quarter fewer pivots and
20% faster solves than rows cheapest-first; block pricing beyond 1,024 cells (whole-matrix pricing was up to 5x
slower than POT at 320 x 320); GOOD_ENOUGH 0.6 ends the scan early: 8-12% faster on CNN/DM, 5-15% on random
problems (0.5 and 0.7 did a little worse); dropping shared mass removes a quarter of the cells of CNN/DM WMS
problems, about 10% faster; the insertion sort of a bag's ids is a sixth of a bag faster than np.sort.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import Counter
from itertools import islice
from pathlib import Path

import numpy as np
import ot
import torch
from numba import njit
from ot.lp.emd_wrap import emd_c
from rouge_score import rouge_scorer

from models.text.records import jsonl_rows
from models.text.vocab import Vocabulary, split_at_sentence_ends
from rewards.base import RewardInput
from rewards.embeddings import STOPWORDS, GloveEmbeddings, WordVectors
from rewards.mover import (SentenceMoverSimilarity, SentenceWordMoverSimilarity, WordMoverSimilarity,
                           document_bag, euclidean_costs, without_shared_mass)
from rewards.rouge import ROUGE_COLUMNS, RougeL, StemCachedTokenizer
from rewards.transport import MAX_PIVOTS, transport_cost

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def load_pairs(data: Path, n: int) -> list[tuple[str, str]]:
    """(pointer-gen summary, reference highlights) texts, one sentence per line, for the first n articles."""
    references = {row.text("id"): row.text("highlights")
                  for row in islice(jsonl_rows(data / "cnndm_see2017_test.jsonl"), n)}
    outputs = jsonl_rows(data / "cnndm_see2017_test_system_outputs.jsonl.gz")
    summaries = {row.data["id"]: row.text("pointer_gen") for row in outputs if row.data["id"] in references}
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
    if len(a) == 0 or len(b) == 0:  # rewards.mover's rule: an empty hypothesis 0, else an empty reference NaN
        return 0.0 if len(a) == 0 else math.nan
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


def transport_problems(reward, inputs: list[RewardInput]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each pair's (a, b, cost) as the reward's kernel solves them; pairs with an empty side are left out."""
    problems = []
    for x in inputs:
        sides = [reward.embeddings.embed_batch(x, side).arrays() for side in ("hyp", "ref")]
        for i in range(len(sides[0][0])):
            (points_a, a), (points_b, b) = (document_bag(rows[i], keep[i], sentence[i], table, extra,
                                                         reward.word_mass, reward.sentence_mass)
                                            for rows, keep, sentence, table, extra in sides)
            if a.size and b.size:
                a, b, cost = without_shared_mass(a, b, euclidean_costs(points_a, points_b))
                if a.size and b.size:
                    problems.append((a, b, cost))
    return problems


@njit(cache=True)
def solve_packed(a, b, cost, offsets):
    """transport_cost of problem k: a[offsets[k, 0]:offsets[k + 1, 0]], b and cost likewise."""
    out = np.empty(len(offsets) - 1)
    for k in range(len(out)):
        n, m = offsets[k + 1, 0] - offsets[k, 0], offsets[k + 1, 1] - offsets[k, 1]
        out[k] = transport_cost(a[offsets[k, 0]:offsets[k + 1, 0]], b[offsets[k, 1]:offsets[k + 1, 1]],
                                cost[offsets[k, 2]:offsets[k + 1, 2]].reshape(n, m))
    return out


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


def padded(problems: list[tuple], batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The problems as zero-padded (cost [B, P, Q], a [B, P], b [B, Q]) batches, for Sinkhorn."""
    batches = []
    for start in range(0, len(problems), batch_size):
        chunk = problems[start:start + batch_size]
        p, q = max(len(a) for a, _, _ in chunk), max(len(b) for _, b, _ in chunk)
        cost = torch.zeros(len(chunk), p, q, dtype=torch.float64)
        a, b = torch.zeros(len(chunk), p, dtype=torch.float64), torch.zeros(len(chunk), q, dtype=torch.float64)
        for i, (wa, wb, c) in enumerate(chunk):
            cost[i, :len(wa), :len(wb)] = torch.from_numpy(c)
            a[i, :len(wa)], b[i, :len(wb)] = torch.from_numpy(wa), torch.from_numpy(wb)
        batches.append((cost, a, b))
    return batches


def compare_solvers(label: str, problems: list[tuple]) -> np.ndarray:
    """Print POT's emd_c vs our solver (CPU time, one core, median of 3) on `problems`; ours' costs."""
    offsets = np.zeros((len(problems) + 1, 3), dtype=np.int64)
    offsets[1:] = np.cumsum([(len(a), len(b), c.size) for a, b, c in problems], axis=0)
    packed = [np.concatenate([p[k].ravel() for p in problems]) for k in range(3)]
    solve_packed(*packed, offsets[:2])  # compile
    pot, _, pot_cpu = timed(lambda: [emd_c(a, b, c, MAX_PIVOTS, 1)[1] for a, b, c in problems], 3)
    ours, _, ours_cpu = timed(lambda: solve_packed(*packed, offsets), 3)
    sizes = np.array([(len(a), len(b)) for a, b, _ in problems])
    print(f"  {label:8s} {len(problems):5d} problems, mean {sizes[:, 0].mean():5.1f} x {sizes[:, 1].mean():5.1f}: "
          f"POT {len(problems) / pot_cpu:8.0f}/s, ours {len(problems) / ours_cpu:8.0f}/s "
          f"({pot_cpu / ours_cpu:.1f}x), max |diff| {np.abs(ours - np.array(pot)).max():.1e}")
    return ours


def random_problems(size: int, count: int, rng: np.random.Generator) -> list[tuple]:
    """Bags of `size` random 50-d points, a third of them shared, with integer counts as weights."""
    problems = []
    for _ in range(count):
        x, y = rng.normal(size=(size, 50)), rng.normal(size=(size, 50))
        y[:size // 3] = x[:size // 3]
        a, b = rng.integers(1, 4, size).astype(float), rng.integers(1, 4, size).astype(float)
        problems.append((a / a.sum(), b / b.sum(), ot.dist(x, y, metric="euclidean")))
    return problems


def alternatives(movers: list, inputs: list[RewardInput], batch_size: int) -> None:
    """The exact solve alone, ours against POT's network simplex on the same problems (the rewards'
    CNN/DM problems, then larger random ones), and batched Sinkhorn against exact."""
    print("\nexact EMD alone, same problems (CPU time, one core): POT's emd_c (LEMON network simplex) vs ours")
    for reward in movers:
        problems = transport_problems(reward, inputs)
        ours = compare_solvers(reward.name, problems)
    rng = np.random.default_rng(0)
    for size in (20, 80, 320):
        compare_solvers("random", random_problems(size, 2560 // size, rng))
    print(f"batched Sinkhorn on the {reward.name} problems, padded batches of {batch_size} (wall clock)")
    exact = torch.from_numpy(ours)
    batches = padded(problems, batch_size)
    for eps, iterations in ((0.1, 100), (0.01, 200), (0.01, 1000)):
        approx, wall, _ = timed(lambda: torch.cat([sinkhorn_cost(c, a, b, eps, iterations) for c, a, b in batches]))
        error = (torch.exp(-approx) - torch.exp(-exact)).abs()
        print(f"  eps={eps:<5} x{iterations:<5} {len(problems) / wall:8.0f} pairs/s, "
              f"similarity error max {error.max():.1e} mean {error.mean():.1e}, "
              f"cost - exact mean {(approx - exact).mean():+.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="folder of the CNN/DM JSONL files")
    parser.add_argument("--pairs", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0, help="threads of the second run of ours (0: torch's default)")
    parser.add_argument("--device", default="cpu", help="where the batches live (cuda: ids cross to the host)")
    parser.add_argument("--repeats", type=int, default=5, help="timings are medians over this many runs")
    parser.add_argument("--alternatives", action="store_true", help="also measure other EMD solvers")
    args = parser.parse_args()
    threads = args.threads or torch.get_num_threads()

    pairs = load_pairs(args.data, args.pairs)
    hyps = [h.split() for h, _ in pairs]
    refs = [[line.split() for line in r.split("\n")] for _, r in pairs]
    vocab, vocab_wall, _ = timed(lambda: Vocabulary.build(hyps + [t for r in refs for t in r], 50_000))
    inputs = [RewardInput.from_texts(hyps[i:i + args.batch_size], refs[i:i + args.batch_size], vocab,
                                     device=args.device)
              for i in range(0, len(pairs), args.batch_size)]
    glove, load_wall, _ = timed(GloveEmbeddings)
    print(f"{len(pairs)} pairs, batches of {args.batch_size}; vocabulary ({len(vocab)} words) {vocab_wall:.2f}s, "
          f"GloVe load {load_wall:.2f}s (once per process)")

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False, tokenizer=WhitespaceTokenizer())
    rewards = [
        (RougeL(), lambda h, r: scorer.score(r, h)["rougeL"].fmeasure),
        (WordMoverSimilarity(glove), lambda h, r: per_pair_mover(h, r, glove.word_vectors, 1.0)),
        (SentenceMoverSimilarity(glove), lambda h, r: per_pair_mover(h, r, glove.word_vectors, 0.0)),
        (SentenceWordMoverSimilarity(glove), lambda h, r: per_pair_mover(h, r, glove.word_vectors, 0.5)),
    ]
    print(f"{'pairs/s':>17s} {'ours':>10s} {'ours':>10s} {'ratio to per pair':>19s}")
    print(f"{'reward':8s} {'per pair':>8s} {'1 thread':>10s} {f'{threads} threads':>10s} {'1 thread':>9s} "
          f"{f'{threads} thr.':>9s} {'max |diff|':>10s} {'setup':>7s}")
    for reward, per_pair in rewards:
        _, setup, _ = timed(lambda: reward(inputs[0]))  # builds the vocabulary's id table once
        runs = []
        for _ in range(args.repeats):  # in turn, so that all three see the same machine load
            run = [timed(lambda: [per_pair(h, r) for h, r in pairs])]
            for count in (1, threads):
                torch.set_num_threads(count)
                fresh = [RewardInput(x.hyp, x.hyp_lens, x.batch, x.vocab) for x in inputs]  # no cached host ids
                run.append(timed(lambda: torch.cat([reward(x) for x in fresh]).cpu()))
            runs.append(run)
        expected = np.array(runs[0][0][0])
        diff = max(np.abs(run[k][0].double().numpy() - expected).max() for run in runs for k in (1, 2))
        walls = [statistics.median(run[k][1] for run in runs) for k in range(3)]
        n = len(pairs)
        print(f"{reward.name:8s} {n / walls[0]:8.0f} {n / walls[1]:10.0f} {n / walls[2]:10.0f} "
              f"{walls[0] / walls[1]:9.1f} {walls[0] / walls[2]:9.1f} {diff:10.1e} {setup:6.2f}s")
    test_rouge(pairs, args.repeats)
    if args.alternatives:
        alternatives([reward for reward, _ in rewards[1:]], inputs, args.batch_size)


def test_rouge(pairs: list[tuple[str, str]], repeats: int) -> None:
    """The test's ROUGE (rouge-score, its four keys, Porter stemming) with rouge-score's own tokenizer and with
    `StemCachedTokenizer`, a fresh one (an empty cache) each run, as a test process starts."""
    keys = list(ROUGE_COLUMNS)
    ways = {"rouge-score's tokenizer": lambda: rouge_scorer.RougeScorer(keys, use_stemmer=True),
            "stems cached": lambda: rouge_scorer.RougeScorer(keys, tokenizer=StemCachedTokenizer())}
    walls, scores = {name: [] for name in ways}, {}
    for _ in range(repeats):
        for name, build in ways.items():
            scorer = build()
            scores[name], wall, _ = timed(lambda: [scorer.score(r, h) for h, r in pairs])
            walls[name].append(wall)
    same = len({repr(v) for v in scores.values()}) == 1
    base, cached = (statistics.median(w) for w in walls.values())
    print(f"test ROUGE (4 keys, stemming), pairs/s: rouge-score's tokenizer {len(pairs) / base:.0f}, stems cached "
          f"{len(pairs) / cached:.0f} ({base / cached:.2f}x; scores {'identical' if same else 'DIFFER'})")


if __name__ == "__main__":
    main()
