r"""Train LS-Score (Wu et al. 2020, `rewards/ls_score.py`) offline, without human labels: each reference summary
should outscore its negatives, built on the fly, under a margin ranking loss. `--negatives` chooses them (default:
the paper's three, 20% of words deleted, words shuffled within sentences, an article sentence inserted, and a fourth
of ours, the reference with one of its sentences repeated; docs/GUIDE.md has both measured); "swapped" (article
words swapped in for the reference's), "dropped" (its best-supported sentence dropped) and "foreign" (words of other
references that the article lacks swapped in) are content negatives.
`--distill W` adds W·mean((S − S₀)²) over the step's summaries, S₀ the untrained encoder's: the trained
similarity is held near the one it starts from where the negatives do not pull it away.

Articles come from the shared CNN/DM sample through `conf/data/cnndm_sample.yaml`: train split only, and every id of
`cnndm_see2017_test_heldout_overlap.tsv` (the human-judged documents, Chaganty et al.'s among them) is dropped again
here, so no judged document is ever trained on. The validation split's pairwise accuracy (reference above negative,
fixed negatives) chooses the checkpoint, or, with `--select-by dev`, the mean Spearman correlation with human
judgments on `--dev` sets (`PATH:FIELD`: JSONL rows with `source`, `candidate` and that judgment; a seeded sample of
`--dev-rows` judged rows of each, reference rows left out), a signal from outside the training articles. `--l2sp`
pulls the trained encoder weights toward the pretrained ones (L2-SP, Li et al. 2018) in place of weight decay.
Writes ls_score.pt (the best), curve.png, training.json and a model card.

The paper's recipe (bert-base, 512 tokens, 5 epochs over ~10k articles) costs ~18 h on 2 CPU cores. The defaults
are the content recipe (docs/GUIDE.md, "Where LS-Score is and is not better than its encoder"), the one that beat the
untrained encoder on judgments it was not chosen on: MiniLM, S the aligned F1 with α = 0, 256 article and 128 summary
tokens, content negatives (deleted, swapped, dropped, foreign) under a 0.1 margin, distillation 2, L2-SP 0.1, 2,536
articles in at most 25 minutes, the checkpoint chosen every 50 steps by the mean Spearman on three shared
human-judgment sets (300 rows each). The earlier cosine recipe (Wu et al.'s negatives, chosen by pairwise accuracy)
scores below its own untrained encoder on held-out content judgments.

    python scripts/train_ls_score.py --threads 1        # ~30 minutes on one thread -> ~/.cache/sumrl/ls_score
    python scripts/train_ls_score.py --threads 1 --similarity cosine --alpha 0.01 --margin 1 --distill 0 --l2sp 0 \
        --max-article-tokens 128 --max-summary-tokens 64 --negatives deleted shuffled inserted repeated \
        --select-by accuracy --eval-every 100 --minutes 20     # the earlier cosine recipe
    python -m trainer.train reward=ls_score ...                     # loads it from ~/.cache/sumrl/ls_score
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from models.text.batch import Example
from models.text.vocab import split_at_sentence_ends
from rewards.ls_score import (CHECKPOINT, KINDS, SIMILARITIES, LSConfig, LSScorer, Negatives,
                              dev_correlations, lexicon, load_encoder, ranking_loss, read_dev, tokenize_batch)
from scripts.cli import command, load_splits, non_negative_float, positive_int, seeded
from trainer.sources import read_id_list

HELD_OUT = "cnndm_see2017_test_heldout_overlap.tsv"
# the checkpoint is chosen by its mean Spearman on these (under the data directory): the content recipe (GUIDE)
DEV_SETS = ("human/realsumm_cnndm.jsonl:litepyramid_recall", "human/qags_xsum.jsonl:fact",
            "human/chaganty2018_cnndm.jsonl:overall")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", nargs="+", action="append", metavar="OVERRIDE",
                        help="Hydra overrides choosing the articles (default: data=cnndm_sample); give --data again "
                             "to pool another source's articles with them, up to --articles of each")
    parser.add_argument("--held-out", default=None,
                        help=f"ids never to train on (default: {HELD_OUT} in the data directory)")
    parser.add_argument("--output", default=os.path.join(os.environ.get("SUMRL_CACHE", "~/.cache/sumrl"), "ls_score"))
    parser.add_argument("--encoder", default="", help="local directory or hub name (default: all-MiniLM-L6-v2)")
    parser.add_argument("--pooling", choices=("cls", "mean"), default="mean", help="the cosine's pooled encodings")
    parser.add_argument("--similarity", choices=SIMILARITIES, default="f1",
                        help="S: the cosine of pooled encodings, or the precision, recall or F1 of the summary's "
                             "greedy token alignment with the article (BERTScore's)")
    parser.add_argument("--alpha", type=float, default=0.0)
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--loss", choices=("single", "two"), default="single",
                        help="single: the paper's hinge on LS; two: the authors' code (L and S hinges)")
    parser.add_argument("--margin", type=float, default=0.1)
    parser.add_argument("--delete-rate", type=float, default=0.2)
    parser.add_argument("--insert-sentences", type=positive_int, default=1)
    parser.add_argument("--negatives", nargs="+", choices=KINDS, default=["deleted", "swapped", "dropped", "foreign"],
                        help="the negative kinds ranked below each reference")
    parser.add_argument("--repeat-sentences", type=positive_int, default=1,
                        help="sentences of its own a 'repeated' negative repeats")
    parser.add_argument("--swap-words", type=positive_int, default=2,
                        help="words a 'swapped' or 'foreign' negative replaces")
    parser.add_argument("--distill", type=non_negative_float, default=2.0,
                        help="weight of mean((S − S_untrained)²) over the step's summaries (0: none)")
    parser.add_argument("--max-article-tokens", type=positive_int, default=256)
    parser.add_argument("--max-summary-tokens", type=positive_int, default=128)
    parser.add_argument("--train-layers", type=int, default=2, help="top encoder layers trained (the rest frozen)")
    parser.add_argument("--articles", type=positive_int, default=2536, help="training articles of each source, at most")
    parser.add_argument("--batch-size", type=positive_int, default=8, help="articles per step (4 summaries each)")
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--epochs", type=positive_int, default=1)
    parser.add_argument("--minutes", type=float, default=25.0, help="stop training after this long")
    parser.add_argument("--eval-every", type=positive_int, default=50, help="steps between validations")
    parser.add_argument("--val-articles", type=positive_int, default=200, help="validation articles of each source")
    parser.add_argument("--l2sp", type=non_negative_float, default=0.1,
                        help="weight of Σ‖θ − θ_pretrained‖² over the trained encoder weights (0: AdamW's decay)")
    parser.add_argument("--dev", nargs="*", default=None, metavar="PATH:FIELD",
                        help="human-judgment sets scored at each validation (Spearman of LS with FIELD; default: "
                             f"{' '.join(DEV_SETS)} under $SUMRL_DATA_DIR, else ../shared/data)")
    parser.add_argument("--dev-rows", type=positive_int, default=300, help="judged rows scored per --dev set")
    parser.add_argument("--select-by", choices=("accuracy", "dev"), default="dev",
                        help="the checkpoint kept: best validation pairwise accuracy, or best mean --dev Spearman")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=positive_int, default=None)
    args = parser.parse_args(argv)
    args.data = args.data or [["data=cnndm_sample"]]
    if args.dev is None:  # the shared human-judgment sets, where they are
        data_dir = Path(os.environ.get("SUMRL_DATA_DIR", "../shared/data")).expanduser()
        args.dev = [f"{data_dir / spec}" for spec in DEV_SETS]
        missing = [spec.rpartition(":")[0] for spec in args.dev if not Path(spec.rpartition(":")[0]).is_file()]
        if missing and args.select_by == "dev":
            parser.error(f"--select-by dev (the default) reads the human-judgment sets {', '.join(missing)}, which are "
                         "not there: set SUMRL_DATA_DIR, give --dev PATH:FIELD sets, or --select-by accuracy")
        args.dev = [] if missing else args.dev
    if args.select_by == "dev" and not args.dev:
        parser.error("--select-by dev needs --dev PATH:FIELD sets to score")
    return args


def usable(examples: list[Example], held_out: set[str]) -> list[Example]:
    """Articles with a reference, none of them held out (the data config drops them too: belt and braces)."""
    return [ex for ex in examples if ex.id not in held_out and ex.reference and ex.source]


def articles(sources: list[list[str]], held_out_path: str | None, per_source: int | None, val_per_source: int,
             rng: random.Random) -> tuple[list[Example], list[Example], set[str]]:
    """(training, validation articles, held-out ids): up to `per_source` shuffled training articles of each data
    config (`sources`: each one's Hydra overrides) and its first `val_per_source` validation ones, pooled; the
    held-out ids (default: those of the first source's data directory) dropped from all of them."""
    train, val, held_out = [], [], None
    for overrides in sources:
        splits, data_dir = load_splits(overrides)
        if held_out is None:
            held_out = read_id_list(held_out_path or Path(data_dir).expanduser() / HELD_OUT)
        own = usable(splits["train"], held_out)
        rng.shuffle(own)
        train += own[:per_source]
        val += usable(splits["val"], held_out)[:val_per_source]
    if len(sources) > 1:  # one source keeps its own order: the single-source recipes reproduce
        rng.shuffle(train)
    return train, val, held_out


def l2sp_penalty(anchors: dict[torch.nn.Parameter, torch.Tensor]) -> torch.Tensor:
    """Σ‖θ − θ₀‖² over the trained pretrained weights θ (θ₀: their values before training)."""
    return sum(((p - p0) ** 2).sum() for p, p0 in anchors.items())


def frozen_below(scorer: LSScorer, train_layers: int) -> list[torch.nn.Parameter]:
    """Freeze the embeddings (and the tied decoder) and all but the top `train_layers` layers; the trainable rest."""
    scorer.encoder.requires_grad_(False)
    layers = scorer.encoder.encoder.layer
    for layer in layers[len(layers) - train_layers:] if train_layers > 0 else []:
        layer.requires_grad_(True)
    return [p for p in scorer.parameters() if p.requires_grad]


@dataclass
class StepBatch:
    """A step's tokenized articles [B, N] and summaries [(1 + kinds)·B, M]: the references' block, then one block
    per negative kind, in `kinds` order. Each is ids, attention mask and counted mask (`tokenize_batch`)."""

    article: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    summaries: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    kinds: tuple[str, ...]


def step_batch(tokenizer, config: LSConfig, examples: list[Example], negatives: Negatives, rng: random.Random
               ) -> StepBatch:
    """Each article's reference and its negatives, built with `rng` and tokenized."""
    references = [" ".join(w for s in ex.reference for w in s) for ex in examples]
    built = [negatives(ex.reference, split_at_sentence_ends(ex.source), rng) for ex in examples]
    texts = references + [b[kind] for kind in negatives.kinds for b in built]
    article = tokenize_batch(tokenizer, [" ".join(ex.source) for ex in examples], config.max_article_tokens)
    return StepBatch(article, tokenize_batch(tokenizer, texts, config.max_summary_tokens), negatives.kinds)


Scores = dict[str, torch.Tensor]  # L, S, LS of a block of summaries, each [B]


def step_scores(scorer: LSScorer, batch: StepBatch) -> tuple[Scores, dict[str, Scores]]:
    """L, S, LS of each article's reference and of each of its negatives: ([B], {kind: [B]})."""
    vectors, real = scorer.article(*batch.article)  # [B, M, K], [B, M]
    blocks = 1 + len(batch.kinds)
    out = scorer(*batch.summaries, (vectors.repeat(blocks, 1, 1), real.repeat(blocks, 1)))
    B = len(vectors)
    parts = [{k: v[i * B:(i + 1) * B] for k, v in out.items()} for i in range(blocks)]
    return parts[0], dict(zip(batch.kinds, parts[1:]))


def drift(positive: Scores, negatives: dict[str, Scores], anchor: tuple[Scores, dict[str, Scores]]) -> torch.Tensor:
    """mean((S − S₀)²) over every summary of the step, S₀ the `anchor` scorer's (`step_scores` of the untrained)."""
    now = torch.cat([positive["S"]] + [negatives[kind]["S"] for kind in negatives])
    then = torch.cat([anchor[0]["S"]] + [anchor[1][kind]["S"] for kind in negatives])
    return ((now - then) ** 2).mean()


@torch.no_grad()
def validate(scorer: LSScorer, tokenizer, examples: list[Example], negatives: Negatives, form: str, margin: float,
             batch_size: int, seed: int) -> dict[str, float]:
    """Loss and pairwise accuracy (LS of the reference above LS of the negative) per negative kind, on negatives
    fixed by `seed`."""
    scorer.eval()
    rng, losses, right = random.Random(seed), [], {kind: 0 for kind in negatives.kinds}
    for i in range(0, len(examples), batch_size):
        positive, negative = step_scores(scorer, step_batch(tokenizer, scorer.config, examples[i:i + batch_size],
                                                            negatives, rng))
        losses.append(float(ranking_loss(positive, negative, form, margin)) * len(positive["LS"]))
        for kind in negatives.kinds:
            right[kind] += int((positive["LS"] > negative[kind]["LS"]).sum())
    scorer.train()
    accuracy = {kind: right[kind] / len(examples) for kind in negatives.kinds}
    return {"loss": sum(losses) / len(examples), "accuracy": sum(accuracy.values()) / len(accuracy)} | accuracy


def plot(history: list[dict], train_curve: list[tuple[int, float]], kinds: tuple[str, ...], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    devs = sorted({key for h in history for key in h if key.startswith("dev/")})
    fig, (left, right, *judged) = plt.subplots(1, 3 if devs else 2, figsize=(15 if devs else 10, 4))
    left.plot([s for s, _ in train_curve], [v for _, v in train_curve], label="train (mean since last point)")
    left.plot([h["step"] for h in history], [h["loss"] for h in history], "o-", label="validation")
    left.set(xlabel="step", ylabel="ranking loss", title="loss")
    left.legend()
    for kind in ("accuracy",) + kinds:
        right.plot([h["step"] for h in history], [h[kind] for h in history], "o-" if kind == "accuracy" else "--",
                   label=kind)
    right.set(xlabel="step", ylabel="P(LS(reference) > LS(negative))", title="validation pairwise accuracy")
    right.legend()
    for panel in judged:  # the out-of-distribution signal (`--dev`), which `--select-by dev` keeps the best of
        scored = [h for h in history if "dev" in h]
        panel.plot([h["step"] for h in scored], [h["dev"] for h in scored], "o-", label="mean (dev)")
        for key in devs:
            panel.plot([h["step"] for h in scored], [h[key] for h in scored], "--", label=key.removeprefix("dev/"))
        panel.axhline(0, color="grey", linewidth=0.5)
        panel.set(xlabel="step", ylabel="Spearman with the judges", title="human judgments (--dev)")
        panel.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    rng = seeded(args.threads, args.seed)
    began = time.time()
    train, val, held_out = articles(args.data, args.held_out, args.articles, args.val_articles, rng)
    print(f"{len(train):,} training and {len(val)} validation articles ({len(held_out):,} held-out ids excluded; "
          f"{time.time() - began:.0f} s)", flush=True)

    config = LSConfig(encoder=args.encoder, pooling=args.pooling, alpha=args.alpha, beta=args.beta,
                      similarity=args.similarity, max_article_tokens=args.max_article_tokens, max_summary_tokens=args.max_summary_tokens)
    tokenizer, encoder = load_encoder(config.encoder)
    scorer = LSScorer(encoder, config)
    trainable = frozen_below(scorer, args.train_layers)
    devs = [read_dev(spec, args.dev_rows, args.seed) for spec in args.dev]
    negatives = Negatives(args.delete_rate, args.insert_sentences, args.repeat_sentences, args.swap_words,
                          tuple(args.negatives), lexicon([ex.reference for ex in train]))
    untrained = copy.deepcopy(scorer).eval().requires_grad_(False) if args.distill > 0 else None
    steps = args.epochs * math.ceil(len(train) / args.batch_size)
    pretrained = {p for p in scorer.encoder.parameters() if p.requires_grad}
    # L2-SP anchors the pretrained weights at their start in place of AdamW's pull toward 0; the new L head decays
    anchors = {p: p.detach().clone() for p in pretrained} if args.l2sp > 0 else {}
    optimizer = torch.optim.AdamW([{"params": [p for p in trainable if p in anchors], "weight_decay": 0.0},
                                   {"params": [p for p in trainable if p not in anchors], "weight_decay": 0.01}],
                                  lr=args.lr)
    output = Path(args.output).expanduser()
    work = output / ".training"  # the run's files until it ends: the evaluator in `output` serves until then
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    evaluate = lambda step: {"step": step} | validate(scorer, tokenizer, val, negatives, args.loss,  # noqa: E731
                                                       args.margin, 32, args.seed + 1) | dev_correlations(
        scorer, tokenizer, devs)
    history = [evaluate(0)]
    best = history[0]
    key = args.select_by  # the checkpoint's signal: "accuracy", or "dev", the mean Spearman over the --dev sets
    print(f"step 0: validation {json.dumps({k: round(v, 4) for k, v in best.items()})}", flush=True)
    scorer.save(work, {"step": 0})
    start, step, running, train_curve = time.time(), 0, [], []
    deadline = start + 60 * args.minutes
    scorer.train()
    for epoch in range(args.epochs):
        for i in range(0, len(train), args.batch_size):
            if time.time() > deadline:
                break
            batch = step_batch(tokenizer, config, train[i:i + args.batch_size], negatives, rng)
            positive, negative = step_scores(scorer, batch)
            loss = ranking_loss(positive, negative, args.loss, args.margin)
            if untrained is not None:
                with torch.no_grad():
                    anchor = step_scores(untrained, batch)
                loss = loss + args.distill * drift(positive, negative, anchor)
            if anchors:
                loss = loss + args.l2sp * l2sp_penalty(anchors)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            running.append(float(loss.detach()))
            if step % args.eval_every == 0:
                train_curve.append((step, sum(running) / len(running)))
                running = []
                history.append(evaluate(step))
                if history[-1][key] > best[key]:
                    best = history[-1]
                    scorer.save(work, {"step": step})
                print(f"step {step}/{steps}  train loss {train_curve[-1][1]:.4f}  validation {key} "
                      f"{history[-1][key]:.4f} (best {best[key]:.4f} at {best['step']})  "
                      f"{time.time() - start:.0f} s", flush=True)
    if step % args.eval_every:  # the last partial interval
        train_curve.append((step, sum(running) / max(len(running), 1)))
        history.append(evaluate(step))
        if history[-1][key] > best[key]:
            best = history[-1]
            scorer.save(work, {"step": step})
    train_seconds = time.time() - start
    wall = time.time() - began
    plot(history, train_curve, negatives.kinds, work / "curve.png")
    settings = vars(args) | {"threads_used": torch.get_num_threads()}
    card = {"best": best, "history": history, "steps": step, "articles_seen": min(step * args.batch_size, len(train)),
            "train_articles": len(train), "val_articles": len(val), "held_out_ids": len(held_out),
            "train_seconds": round(train_seconds), "wall_seconds": round(wall), "settings": settings}
    (work / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    similarity_text = (f"the cosine of the article's and the summary's {args.pooling}-pooled encodings"
                       if args.similarity == "cosine" else f"the {args.similarity} of the summary's greedy token "
                       "alignment with the article")
    distilled = f"; distilled toward the untrained S, weight {args.distill}" if untrained is not None else ""
    (work / "README.md").write_text(f"""# LS-Score evaluator (Wu et al. 2020) for sumrl

Trained by `scripts/train_ls_score.py`: an encoder with an L head (mean token log-probability) and an S
({similarity_text}), LS = {args.alpha}·L + {args.beta}·S, under a margin ranking loss
("{args.loss}", margin {args.margin}) of each reference over its negatives built on the fly: \
{", ".join(negatives.kinds)} (delete rate {args.delete_rate}, {args.insert_sentences} sentence(s) inserted, \
{args.repeat_sentences} repeated, {args.swap_words} word(s) swapped){distilled}.

- Data: {' + '.join(f"`{' '.join(source)}`" for source in args.data)}, train splits, {len(held_out):,} held-out ids ({HELD_OUT}) excluded:
  {card['articles_seen']:,} of {len(train):,} articles seen; validation: {len(val)} articles of the val splits.
- Recipe: encoder {args.encoder or 'all-MiniLM-L6-v2'}, top {args.train_layers} layers trained, article
  {args.max_article_tokens} / summary {args.max_summary_tokens} tokens, {args.batch_size} articles per step,
  AdamW lr {args.lr}{f", L2-SP {args.l2sp} toward the pretrained weights" if anchors else ""}; {step} steps.
- Wall time: {train_seconds / 60:.1f} minutes of training, {wall / 60:.1f} in all, on {torch.get_num_threads()}
  thread(s).
- Checkpoint (ls_score.pt), chosen by {"validation pairwise accuracy" if key == "accuracy" else "mean dev Spearman"}:
  step {best['step']}, validation pairwise accuracy {best['accuracy']:.4f}
  ({', '.join(f"{kind} {best[kind]:.4f}" for kind in negatives.kinds)}); untrained: {history[0]['accuracy']:.4f}.
{"".join(f"- {name}: Spearman {best[name]:.4f} (untrained {history[0][name]:.4f})" + chr(10)
         for name in best if name.startswith("dev"))}- Settings: {json.dumps(settings)}
""")
    for name in (CHECKPOINT, "curve.png", "training.json", "README.md"):  # finished: it replaces the last one
        os.replace(work / name, output / name)
    work.rmdir()
    print(f"saved {output}: best validation {key} {best[key]:.4f} at step {best['step']} "
          f"(untrained {history[0][key]:.4f}); {step} steps in {train_seconds / 60:.1f} min", flush=True)


cli = command(main)  # bad input is one line, not a traceback

if __name__ == "__main__":
    cli()
