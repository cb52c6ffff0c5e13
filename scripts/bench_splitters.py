r"""Sentence splitters for raw text, compared for quality and speed (docs/RESULTS.md, "Sentence splitting").

    pip install pysbd blingfire   # candidates sumrl does not install (spaCy: its qa extra); a missing one is left out
    python scripts/bench_splitters.py [--data ../shared/data/cnndm_see2017_test.jsonl] [--sentences 400]

Two gold sets: `--sentences` sentences of CNN/DM articles (See et al.'s tokenized release, whose sentence-final
tokens mark the boundaries), detokenized back to text with each sentence's first letter capitalized (the release is
lower-cased, so names after an abbreviation stay lower-case: the easy case); and `HARD`, sentences written here
around abbreviations, initials, decimals, quotes and ellipses, cased; and the CNN/DM set lower-cased whole (as the
shared TL;DR sample and human-judgment texts are). Quality is the precision, recall and F1 of the boundaries a
splitter puts between sentences; speed is milliseconds per 1,000 sentences of the CNN/DM set, on one thread.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import time
from itertools import islice
from pathlib import Path
from typing import Callable

from nltk.tokenize.treebank import TreebankWordDetokenizer

from models.text.vocab import split_at_punctuation, split_at_sentence_ends, split_sentences

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "cnndm_see2017_test.jsonl"

# Each inner list is one text; each string one gold sentence.
HARD = [
    ["Mr. Smith met the U.S. President at 3 p.m. on Jan. 5 in Washington.", "They spoke for an hour."],
    ["Dr. Jane Doe, Ph.D., joined Acme Inc. in 2019.", "She leads its research arm."],
    ["J. K. Rowling wrote the books.", "J.R.R. Tolkien wrote others."],
    ["The stock rose 3.5 percent to $12.75 a share.", "Analysts expected 2.1."],
    ['"We will win," he said.', '"Nobody doubts it."', "The crowd cheered."],
    ['She asked, "Is it over?"', "He did not answer.", "Then he left."],
    ["It was cold... very cold.", "Nobody went out."],
    ["The team ranked No. 5 in the country.", "It was founded by Gen. Patton's grandson."],
    ["The U.K. and the E.U. signed the deal.", "It takes effect next year."],
    ["Police arrived at 11:45 a.m. Witnesses said the van sped off.", "Nobody was hurt."],
    ["Prices fell (by about 2 per cent).", "Sales rose."],
    ["The firm, e.g. Apple or Google, pays more.", "Others pay less."],
    ["St. Louis beat the Chicago Cubs 4-3.", "The series is tied."],
    ["He moved to Washington, D.C. in May.", "His wife stayed in N.Y. with the kids."],
    ["Sen. John McCain (R-Ariz.) spoke first.", "Rep. Nancy Pelosi followed."],
    ["The vote was 52-48.", "Version 2.0 ships in Oct. and costs $9.99."],
    ["What happened?", "Nobody knows!", "The inquiry continues."],
    ["The ship sank at approx. 2 a.m.", "All 300 passengers survived."],
]


def cnndm_texts(path: Path, sentences: int) -> list[list[str]]:
    """Articles as lists of gold sentences, detokenized and capitalized, until `sentences` sentences are taken."""
    detokenize = TreebankWordDetokenizer().detokenize
    texts, taken = [], 0
    with path.open(encoding="utf-8") as f:
        for line in f:
            tokens = json.loads(line)["article"].replace("-lrb-", "(").replace("-rrb-", ")").split()
            gold = []
            for sentence in split_at_sentence_ends(tokens):
                while sentence and sentence[0] in ("''", ")") and gold:  # a closing quote ends the sentence before
                    gold[-1] += {"''": '"', ")": ")"}[sentence.pop(0)]
                if sentence:
                    text = detokenize(sentence).replace("``", '"').replace("''", '"')
                    first = next((i for i, c in enumerate(text) if c.isalpha()), 0)
                    gold.append(text[:first] + text[first:].capitalize()[:1] + text[first + 1:])
            texts.append(gold[: sentences - taken])
            taken += len(texts[-1])
            if taken >= sentences:
                return texts
    return texts


def boundaries(text: str, sentences: list[str]) -> set[int]:
    """Where each sentence after the first starts in `text`, counted in non-space characters: comparable across
    splitters that change spaces or drop a character (the regex drops closing quotes)."""
    squeezed, starts, position = "".join(text.split()), set(), 0
    for sentence in sentences:
        sentence = "".join(sentence.split())
        found = squeezed.find(sentence[:20], position)
        if sentence and found >= 0:
            starts.add(found)
            position = found + len(sentence)
    return starts - {0}


def f1(splitter: Callable[[str], list[str]], texts: list[list[str]]) -> tuple[float, float, float]:
    found = right = wanted = 0
    for gold in texts:
        text = " ".join(gold)
        predicted, expected = boundaries(text, splitter(text)), boundaries(text, gold)
        found, right, wanted = found + len(predicted), right + len(predicted & expected), wanted + len(expected)
    precision, recall = right / max(found, 1), right / max(wanted, 1)
    return precision, recall, 2 * precision * recall / max(precision + recall, 1e-9)


def candidates() -> dict[str, Callable[[str], list[str]]]:
    """Every installed splitter, each as text -> sentences."""
    found = {"punctuation (sumrl before)": split_at_punctuation, "sumrl now (syntok; punctuation if no capital)":
             split_sentences}
    if importlib.util.find_spec("spacy"):
        import spacy
        nlp = spacy.blank("en")
        nlp.add_pipe("sentencizer")
        found["spaCy sentencizer"] = lambda text: [s.text for s in nlp(text).sents]
    if importlib.util.find_spec("pysbd"):
        import pysbd
        segmenter = pysbd.Segmenter(language="en", clean=False)
        found["pysbd"] = segmenter.segment
    if importlib.util.find_spec("blingfire"):
        import blingfire
        found["blingfire"] = lambda text: blingfire.text_to_sentences(text).split("\n")
    if importlib.util.find_spec("syntok"):
        from syntok import segmenter as syntok
        found["syntok"] = lambda text: ["".join(t.spacing + t.value for t in sentence)
                                        for paragraph in syntok.process(text) for sentence in paragraph]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="See et al.'s tokenized CNN/DM (JSONL, `article`)")
    parser.add_argument("--sentences", type=int, default=400)
    args = parser.parse_args()
    texts = cnndm_texts(args.data, args.sentences)
    n = sum(len(t) for t in texts)
    lowered = [[sentence.lower() for sentence in gold] for gold in texts]
    print(f"{n} CNN/DM sentences in {len(texts)} articles; {sum(len(t) for t in HARD)} hard sentences in {len(HARD)}"
          " texts\n\n| splitter | CNN/DM P / R / F1 | CNN/DM lower-cased | hard | ms per 1,000 sentences |\n"
          "|---|---|---|---|---|")
    for name, splitter in candidates().items():
        splitter(" ".join(next(islice(texts, 1))))  # a first call may load rules
        start = time.perf_counter()
        for gold in texts:
            splitter(" ".join(gold))
        ms = 1000 * (time.perf_counter() - start) / n * 1000
        cells = [" / ".join(f"{v:.3f}" for v in f1(splitter, gold)) for gold in (texts, lowered, HARD)]
        print(f"| {name} | {' | '.join(cells)} | {ms:.0f} |")


if __name__ == "__main__":
    main()
