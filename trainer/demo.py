"""The embedded demo corpus: deterministic news-like article/summary pairs, generated, not shipped.

Each article mixes two or three "fact" sentences about people with filler sentences. The summary
restates the facts, verbatim or paraphrased with synonyms, so ROUGE (exact words) and embedding
metrics (meaning) disagree. By default which of the two a fact gets follows from the person's job in
the article (`PARAPHRASED_JOBS`): a rule a model can learn, so that a reward's signal is not drowned
by noise no model can predict. `paraphrase="coin"` flips a fair coin instead: the corpus then holds an
irreducible ambiguity, where a converged MLE model still has something for a reward to settle. Rare
invented surnames fall outside any small vocabulary and must be copied from the article.
"""
from __future__ import annotations

import random
from typing import Iterator

from trainer.sources import Record

FIRST = ("john mary david sarah michael laura james anna robert emma thomas linda peter julia daniel "
         "susan mark helen paul karen").split()
SYLLABLES = "ka lo mi ren dor va sel tin bru gan fe zor pel qui mar ost lun bex".split()
CITIES = ("london paris boston chicago madrid berlin tokyo sydney toronto dublin denver seattle "
          "atlanta houston miami vienna oslo lisbon").split()
JOBS = "teacher doctor farmer lawyer nurse engineer pilot chef student banker".split()
PARAPHRASED_JOBS = set(JOBS[::2])  # summaries of these people's facts paraphrase them
DAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
# (article verb phrase, summary paraphrase) pairs: same meaning, different words.
ACTIONS = [
    ("bought a large house", "purchased a big home"),
    ("won the city marathon", "finished first in the local race"),
    ("opened a small restaurant", "launched a little cafe"),
    ("found a lost dog", "discovered a missing puppy"),
    ("sold an old car", "auctioned a used vehicle"),
    ("wrote a popular book", "published a successful novel"),
    ("rescued a young child", "saved a small boy"),
    ("started a new company", "founded a fresh business"),
    ("received a national award", "was given a major prize"),
    ("painted a huge mural", "created a giant painting"),
    ("lost a valuable ring", "misplaced an expensive jewel"),
    ("built a wooden boat", "constructed a timber ship"),
]
FILLERS = [
    "the weather in {city} was cold on {day} .",
    "officials in {city} declined to comment on the matter .",
    "local newspapers reported the story on {day} .",
    "many residents of {city} gathered near the town hall .",
    "the police said the investigation was continuing .",
    "traffic in {city} was heavy for most of the day .",
    "a spokesman for the council thanked the volunteers .",
    "the event attracted visitors from across the country .",
    "prices in {city} have risen sharply this year .",
    "the mayor of {city} is expected to speak on {day} .",
]


def _surname(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3)))


def make_pair(rng: random.Random, paraphrase: str = "by_job") -> tuple[str, str]:
    """One article and its summary, both lower-case, space-tokenized, one summary sentence per line."""
    facts, summary = [], []
    for _ in range(rng.randint(2, 3)):
        name = f"{rng.choice(FIRST)} {_surname(rng)}"
        city, job, day = rng.choice(CITIES), rng.choice(JOBS), rng.choice(DAYS)
        action, synonyms = rng.choice(ACTIONS)
        age = rng.randint(21, 80)
        facts.append(f"{name} , a {age}-year-old {job} from {city} , {action} on {day} .")
        paraphrased = job in PARAPHRASED_JOBS if paraphrase == "by_job" else rng.random() >= 0.5
        summary.append(f"{job} {name} {synonyms} in {city} ." if paraphrased else f"{name} {action} in {city} .")
    fillers = [rng.choice(FILLERS).format(city=rng.choice(CITIES), day=rng.choice(DAYS))
               for _ in range(rng.randint(3, 6))]
    sentences, position = fillers, 0
    for fact in facts:  # facts keep their order; fillers fall around them
        position = rng.randint(position, len(sentences))
        sentences.insert(position, fact)
        position += 1
    return " ".join(sentences), "\n".join(summary)


class DemoCorpus:
    """`n` pairs from a seeded generator: the same seed always gives the same corpus. `paraphrase`: "by_job"
    (the summary's wording follows from the article) or "coin" (a fair coin per fact)."""

    def __init__(self, n: int = 3000, seed: int = 0, paraphrase: str = "by_job"):
        if paraphrase not in ("by_job", "coin"):
            raise ValueError(f"DemoCorpus: paraphrase must be 'by_job' or 'coin', got {paraphrase!r}")
        self.n, self.seed, self.paraphrase = n, seed, paraphrase

    def __str__(self) -> str:
        return f"DemoCorpus(n={self.n}, seed={self.seed}, paraphrase={self.paraphrase!r})"

    def records(self) -> Iterator[Record]:
        rng = random.Random(self.seed)
        for i in range(self.n):
            article, summary = make_pair(rng, self.paraphrase)
            yield Record(id=f"demo-{i:05d}", article=article, summary=summary, where=f"demo corpus #{i}")
