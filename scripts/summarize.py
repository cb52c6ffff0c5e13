r"""Summarize your own articles with a trained model: beam search from a checkpoint, one summary per article.

    sumrl-summarize --checkpoint runs/…/checkpoints/best.ckpt --input articles.jsonl --output summaries.jsonl \
        --beam-size 5 --min-length 35 --block-trigrams --batch-size 32 --device cuda
    sumrl-summarize --checkpoint <folder sumrl-export wrote> --input articles.txt --output summaries.jsonl

Input: JSONL (an `article` field, `id` optional), CSV (the same columns), or plain text, one article per line (any
other extension). Each article is raw text, as pasted from the web: lower-cased and split into sentences and PTB
tokens, as the models' training text was (See et al.'s CNN/DM was PTB-tokenized the same way), so "deaths." and
"owner," reach the model as the words it learned; `--tokenized` reads text tokenized so already on whitespace. Every
line is read and checked before the model decodes any: a bad one stops the command with its file and line. A summary
that comes out empty is counted in a warning.

Output: one JSON line per article, in input order: `id` (the input's, else its line number) and `summary` (tokens
joined by spaces, one sentence per line, as a run's summaries.jsonl holds them).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from models.text.records import DataError, csv_rows, jsonl_rows, numbered_lines, write_text
from scripts.cli import InputError, command, int_at_least, output_file, positive_int
from trainer.sources import Fields, Record

if TYPE_CHECKING:
    import torch

    from models.pointer_generator import PointerGenerator
    from models.text.batch import Example
    from models.text.vocab import Vocabulary


class ArticleFile:
    """The articles of a JSONL or CSV file (`article`, optional `id`) or of a text file (one a line, its line number
    its id), as `Record`s (a `trainer.sources.Source`); an empty article is refused with its file and line."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.fields = Fields(article="article", summary=None, id="id")
        self.numbered = Fields(article="article", summary=None, id=None)  # a file without ids: line numbers

    def __str__(self) -> str:
        return str(self.path)

    def records(self) -> Iterator[Record]:
        if not self.path.is_file():
            raise DataError(f"{self.path}: no such file")
        for record in self._read():
            if not record.article.strip():
                raise DataError(f"{record.where}: the article is empty")
            yield record

    def _read(self) -> Iterator[Record]:
        suffix = self.path.suffix.lower()
        if suffix in (".jsonl", ".json", ".csv"):
            rows = csv_rows(self.path) if suffix == ".csv" else jsonl_rows(self.path)
            yield from ((self.fields if "id" in row.data else self.numbered).record(row.data, row.where, row.line)
                        for row in rows)
            return
        for number, line in numbered_lines(self.path):
            if line.strip():  # a blank line separates nothing: it is no article
                yield Record(id=str(number), article=line, summary=None, where=f"{self.path}:{number}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sumrl-summarize", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, required=True,
                        help="a run's checkpoints/best.ckpt (MLE or mixed), or a folder sumrl-export wrote")
    parser.add_argument("--input", type=Path, required=True, help="articles: .jsonl, .csv, or text, one a line")
    parser.add_argument("--output", type=Path, required=True, help="JSONL: id and summary per article, input order")
    parser.add_argument("--beam-size", type=positive_int, default=5)
    parser.add_argument("--min-length", type=int_at_least(0), default=0, help="tokens before </s> may end a summary")
    parser.add_argument("--max-length", type=positive_int, default=None,
                        help="tokens at most (default: the checkpoint's data.max_target_len)")
    parser.add_argument("--block-trigrams", action="store_true", help="no trigram twice in a summary (See et al.)")
    parser.add_argument("--tokenized", action="store_true",
                        help="the articles are lower-cased PTB tokens already (See et al.'s CNN/DM files): split on "
                             "whitespace instead of tokenizing")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="articles decoded together")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    args = parser.parse_args(argv)
    output_file(parser, args.output, "--output", args.input)
    return args


def device_of(name: str) -> torch.device:
    import torch
    try:
        device = torch.device(name)
    except RuntimeError:
        raise InputError(f"--device {name}: not a device (cpu, cuda or cuda:N)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"--device {name}: this machine has no CUDA device (or torch is a CPU build)")
    return device


def summarize(model: PointerGenerator, vocab: Vocabulary, examples: list[Example], reading: dict[str, Any],
              batch_size: int, beam: dict[str, Any]) -> list[str]:
    """Each example's beam summary as text, in the examples' order, with a progress bar."""
    from tqdm import tqdm

    from models.decoding import beam_search
    from models.text.batch import collate
    from models.text.vocab import as_text
    from trainer.evaluate import decoded_summaries
    summaries = []
    with tqdm(total=len(examples), unit="article", desc="summarizing") as bar:
        for start in range(0, len(examples), batch_size):
            chunk = examples[start:start + batch_size]
            batch = collate(chunk, vocab, reading["max_source_len"], reading["max_target_len"])
            batch = batch.to(model.embedding.weight.device)
            decoded = beam_search(model, model.encode(batch), **beam)
            summaries += as_text([row["summary"] for row in decoded_summaries(vocab, decoded, batch)])
            bar.update(len(chunk))
    return summaries


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    from models.decoding import BlockRepeatedTrigrams, MinLength, check_beam_settings
    from trainer.data import tokenize_records
    from trainer.export import load_summarizer
    device = device_of(args.device)
    model, vocab, reading = load_summarizer(args.checkpoint, device)
    processors = [MinLength(args.min_length), *([BlockRepeatedTrigrams()] if args.block_trigrams else [])]
    beam = {"beam_size": args.beam_size, "max_len": args.max_length or reading["max_target_len"],
            "processors": processors}
    try:
        check_beam_settings(**beam)
    except ValueError as error:
        raise InputError(f"{error} (--min-length, --max-length)") from None
    examples = tokenize_records(ArticleFile(args.input), args.tokenized, "input")  # all read before decoding
    with torch.inference_mode():
        summaries = summarize(model, vocab, examples, reading, args.batch_size, beam)
    empty = sum(not summary.strip() for summary in summaries)
    if empty:
        print(f"sumrl-summarize: warning: {empty} of {len(summaries)} summaries came out empty (the model ended them at "
              "once): --min-length 35 --block-trigrams decode as the grids test", file=sys.stderr)
    lines = "".join(json.dumps({"id": e.id, "summary": s}) + "\n" for e, s in zip(examples, summaries))
    write_text(args.output, lines)


cli = command(main)  # the console command: bad input is one line, not a traceback

if __name__ == "__main__":
    cli()
