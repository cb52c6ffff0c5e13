"""Where article/summary records come from: the Hugging Face hub (or any `datasets` loader), local
JSONL/CSV/Parquet files, and the embedded demo corpus. Every source yields `Record`s that say where
they came from, so that bad data is reported by file, line and field."""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol


class DataError(ValueError):
    """Bad input data; the message names the file (or dataset), the line (or row) and the field."""


@dataclass
class Record:
    id: str
    article: str
    summary: str | None  # None: a reference-free article
    where: str  # "file.jsonl:12" or "abisee/cnn_dailymail[train] row 12"


class Source(Protocol):
    def records(self) -> Iterator[Record]: ...


@dataclass
class Fields:
    """Field names of a source's records; `summary=None` reads reference-free articles."""

    article: str = "article"
    summary: str | None = "highlights"
    id: str | None = "id"

    def record(self, row: dict, where: str, index: int) -> Record:
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected an object with fields, got {type(row).__name__}")
        article = self._text(row, self.article, where)
        summary = self._text(row, self.summary, where) if self.summary else None
        rid = row.get(self.id) if self.id else None
        return Record(id=str(rid) if rid is not None else str(index), article=article, summary=summary,
                      where=where)

    @staticmethod
    def _text(row: dict, name: str, where: str) -> str:
        if name not in row:
            raise DataError(f"{where}: missing field {name!r} (fields present: {sorted(row)})")
        value = row[name]
        if not isinstance(value, str):
            raise DataError(f"{where}: field {name!r} must be a string, got {type(value).__name__}")
        return value


class HubDataset:
    """A `datasets.load_dataset` split: the hub's `abisee/cnn_dailymail` (config 3.0.0) by default.

    The same loader reads local files (`path="json", data_files=...`), which is how it is tested offline.
    """

    def __init__(self, path: str = "abisee/cnn_dailymail", name: str | None = "3.0.0", split: str = "train",
                 data_files: str | list[str] | None = None, fields: Fields | None = None,
                 limit: int | None = None):
        self.path, self.name, self.split, self.data_files = path, name, split, data_files
        self.fields = fields or Fields()
        self.limit = limit

    def records(self) -> Iterator[Record]:
        import datasets  # deferred: importing datasets costs seconds

        data = datasets.load_dataset(self.path, self.name, split=self.split, data_files=self.data_files)
        if self.limit is not None:
            data = data.select(range(min(self.limit, len(data))))
        for i, row in enumerate(data):
            yield self.fields.record(row, f"{self.path}[{self.split}] row {i}", i)


class LocalFile:
    """A local JSONL, CSV or Parquet file (format from the extension unless given)."""

    def __init__(self, path: str, fields: Fields | None = None, format: str | None = None,
                 limit: int | None = None):
        self.path = Path(path).expanduser()
        self.fields = fields or Fields()
        suffix = self.path.suffix.lstrip(".").lower()
        self.format = format or {"json": "jsonl", "jsonl": "jsonl", "csv": "csv", "parquet": "parquet"}.get(suffix, suffix)
        self.limit = limit
        if self.format not in ("jsonl", "csv", "parquet"):
            raise DataError(f"{self.path}: unknown format {self.format!r} (expected jsonl, csv or parquet)")

    def records(self) -> Iterator[Record]:
        if not self.path.exists():
            raise DataError(f"{self.path}: no such file")
        rows = {"jsonl": self._jsonl, "csv": self._csv, "parquet": self._parquet}[self.format]()
        for i, (where, row) in enumerate(rows):
            if self.limit is not None and i >= self.limit:
                return
            yield self.fields.record(row, where, i)

    def _jsonl(self) -> Iterator[tuple[str, dict]]:
        with self.path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    yield f"{self.path}:{n}", json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{self.path}:{n}: malformed JSON ({e.msg} at column {e.colno})") from None

    def _csv(self) -> Iterator[tuple[str, dict]]:
        with self.path.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            for row in reader:
                yield f"{self.path}:{reader.line_num}", row

    def _parquet(self) -> Iterator[tuple[str, dict]]:
        import pandas as pd

        for i, row in enumerate(pd.read_parquet(self.path).to_dict(orient="records")):
            yield f"{self.path} row {i}", row


def read_id_list(path: str | Path) -> set[str]:
    """Ids from the first column of a text/TSV/CSV file; a header line named `id` is skipped."""
    path = Path(path).expanduser()
    if not path.exists():
        raise DataError(f"{path}: id exclusion file not found")
    ids = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        first = line.replace(",", "\t").split("\t")[0].strip()
        if first and first != "id":
            ids.add(first)
    return ids
