r"""Reader of the MSR Abstractive Text Compression release (Toutanova et al. 2016; Microsoft Research Data License:
user-supplied, never committed or downloaded). Each line of its `RawData/*.tsv` and of the rated system outputs
(`test_output.{t3,ilp,seq2seq,namas}.tsv`, assumed to share the format) is, in UTF-8 with a BOM:

    SourceID \t Domain \t SourceText ( ||| CompressedText \t JudgeId \t numRatings (\t Rating)^n )+

Each rating code packs one rater's meaning and grammar scores (`RATING_CODES`). Targets per compression are the
means over its raters of meaning, grammar and combined = ½M + ½G (§4.3).

    python -m rewards.msr_compression RawData/test.tsv --system t3=test_output.t3.tsv ... > judged.jsonl

writes one JSON row per rated system output (input id, system, candidate, the source's crowd compressions as
`references` with the first as `reference`, meaning, grammar, combined) for `scripts/correlate.py`.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from models.text.records import DataError

# code -> (meaning, grammar), 3 best; the release's README table (a public parser got this wrong: test it).
RATING_CODES = {6: (3, 3), 7: (3, 2), 9: (3, 1), 11: (2, 3), 12: (2, 2), 14: (2, 1), 21: (1, 3), 22: (1, 2), 24: (1, 1)}


@dataclass(frozen=True)
class Compression:
    text: str
    judge: str
    ratings: tuple[tuple[int, int], ...]  # (meaning, grammar) per rater

    @property
    def meaning(self) -> float | None:
        return statistics.fmean(m for m, _ in self.ratings) if self.ratings else None

    @property
    def grammar(self) -> float | None:
        return statistics.fmean(g for _, g in self.ratings) if self.ratings else None

    @property
    def combined(self) -> float | None:
        return None if not self.ratings else 0.5 * self.meaning + 0.5 * self.grammar


@dataclass(frozen=True)
class Source:
    id: str
    domain: str
    text: str
    compressions: tuple[Compression, ...]


def parse_compression(chunk: str, where: str) -> Compression:
    """`CompressedText \t JudgeId \t numRatings (\t Rating)^n`; `where` ("file:line") prefixes errors."""
    fields = chunk.strip("\r\n").split("\t")
    if len(fields) < 3:
        raise DataError(f"{where}: compression needs CompressedText, JudgeId and numRatings, got {len(fields)} "
                         f"field(s): {chunk[:60]!r}")
    text, judge, count, codes = fields[0].strip(), fields[1].strip(), fields[2].strip(), fields[3:]
    if not count.isdigit():
        raise DataError(f"{where}: field numRatings must be a count, got {count!r}")
    codes = [c.strip() for c in codes if c.strip()]
    if len(codes) != int(count):
        raise DataError(f"{where}: field numRatings says {count} ratings, found {len(codes)}")
    ratings = []
    for code in codes:
        if not code.isdigit() or int(code) not in RATING_CODES:
            raise DataError(f"{where}: field Rating {code!r} is not a rating code ({sorted(RATING_CODES)})")
        ratings.append(RATING_CODES[int(code)])
    return Compression(text, judge, tuple(ratings))


def read_msr(path: str | Path) -> list[Source]:
    """Every non-blank line of one release file (a leading BOM is dropped)."""
    sources = []
    with open(path, encoding="utf-8-sig") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            head, *chunks = line.rstrip("\r\n").split("|||")
            fields = head.split("\t")
            if len(fields) < 3 or not fields[0].strip():
                raise DataError(f"{where}: expected SourceID, Domain and SourceText before '|||', got {head[:60]!r}")
            if not chunks:
                raise DataError(f"{where}: no '|||' compression after the source text")
            sources.append(Source(fields[0].strip(), fields[1].strip(), "\t".join(fields[2:]).strip(),
                                  tuple(parse_compression(c.strip(" "), where) for c in chunks)))
    return sources


def judged_rows(references: list[Source], systems: dict[str, list[Source]]) -> list[dict]:
    """One row per rated system output whose source has crowd compressions, for `scripts/correlate.py`."""
    by_id = {s.id: s for s in references}
    rows = []
    for system, sources in systems.items():
        for source in sources:
            if source.id not in by_id:
                continue
            refs = [c.text for c in by_id[source.id].compressions]
            for output in source.compressions:
                if output.ratings:
                    rows.append({"input": source.id, "domain": source.domain, "system": system,
                                 "candidate": output.text, "source": source.text, "reference": refs[0],
                                 "references": refs, "meaning": output.meaning, "grammar": output.grammar,
                                 "combined": output.combined})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("references", help="RawData file whose compressions are the references (e.g. test.tsv)")
    parser.add_argument("--system", nargs="+", required=True, metavar="NAME=PATH", help="rated system outputs")
    args = parser.parse_args(argv)
    systems = {}
    for spec in args.system:
        name, sep, path = spec.partition("=")
        if not sep:
            raise DataError(f"--system wants NAME=PATH, got {spec!r}")
        systems[name] = read_msr(path)
    for row in judged_rows(read_msr(args.references), systems):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DataError as e:
        sys.exit(f"error: {e}")
