"""Where article/summary records come from: the Hugging Face hub (or any `datasets` loader), local
JSONL/CSV/Parquet files, and the embedded demo corpus. Every source yields `Record`s that say where
they came from, so that bad data is reported by file, line and field."""
from __future__ import annotations

import socket
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol
from urllib.parse import urlparse

from models.text.records import DataError, csv_rows, jsonl_rows, numbered_lines


@dataclass
class Record:
    id: str
    article: str
    summary: str | None  # None: a reference-free article
    where: str  # "file.jsonl:12" or "abisee/cnn_dailymail[train] row 12"


class Source(Protocol):
    """Yields records; `str(source)` names it (a file, a dataset) in errors."""

    def records(self) -> Iterator[Record]: ...


@dataclass
class Fields:
    """Field names of a source's records; `summary=None` reads reference-free articles, `id=None` numbers the records
    (from 0). A record without its id field is an error: numbering it instead would let held-out ids
    (`data.exclude_ids`) match nothing, silently."""

    article: str = "article"
    summary: str | None = "highlights"
    id: str | None = "id"

    def record(self, row: dict, where: str, index: int) -> Record:
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected an object with fields, got {type(row).__name__}")
        article = self._text(row, self.article, where)
        summary = self._text(row, self.summary, where) if self.summary else None
        if self.id is None:
            rid = str(index)
        elif row.get(self.id) is None:
            raise DataError(f"{where}: no id in field {self.id!r} (fields.id; fields present: {sorted(row)}): name the "
                            "id field, or set fields.id=null")
        else:
            rid = _encodable(str(row[self.id]), self.id, where)
        return Record(id=rid, article=article, summary=summary, where=where)

    @staticmethod
    def _text(row: dict, name: str, where: str) -> str:
        if name not in row:
            raise DataError(f"{where}: missing field {name!r} (fields present: {sorted(row)})")
        value = row[name]
        if not isinstance(value, str):
            raise DataError(f"{where}: field {name!r} must be a string, got {type(value).__name__}")
        return _encodable(value, name, where)


def _encodable(value: str, name: str, where: str) -> str:
    """`value` if it encodes as UTF-8: a lone surrogate (JSON's "\\ud800") would fail later, in the
    vocabulary's hash or file, far from its line."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise DataError(f"{where}: field {name!r} holds a lone surrogate at character {e.start + 1}") from None
    return value


class HubDataset:
    """A `datasets.load_dataset` split: the hub's `abisee/cnn_dailymail` (config 3.0.0) by default.

    The same loader reads local files (`path="json", data_files=...`), which is how it is tested offline. Where the
    hub cannot be reached, `datasets` reads its cached copy, or the source fails in one line (not after five retries).
    """

    def __init__(self, path: str = "abisee/cnn_dailymail", name: str | None = "3.0.0", split: str = "train",
                 data_files: str | list[str] | None = None, fields: Fields | None = None,
                 limit: int | None = None):
        self.path, self.name, self.split, self.data_files = path, name, split, data_files
        self.fields = fields or Fields()
        self.limit = limit

    def __str__(self) -> str:
        return f"{self.path}[{self.split}]"

    def records(self) -> Iterator[Record]:
        import datasets  # deferred: importing datasets costs seconds

        with hub_offline_unless_reachable() as offline:
            try:
                data = datasets.load_dataset(self.path, self.name, split=self.split, data_files=self.data_files)
            except (ConnectionError, FileNotFoundError, ValueError) as error:  # what load_dataset raises for these
                reason = str(error).splitlines()[0] if str(error) else type(error).__name__
                where = ("the Hugging Face hub cannot be reached from here and no copy is cached, so run once where "
                         "it can (datasets keeps a copy), or" if offline else f"{reason}: check data.*.path, name and "
                         "split, or")
                raise DataError(f"{self}: {where} read local files: data=local data.train.path=<file.jsonl> "
                                "(docs/GUIDE.md, 'Data')") from None
        if self.limit is not None:
            data = data.select(range(min(self.limit, len(data))))
        for i, row in enumerate(data):
            yield self.fields.record(row, f"{self.path}[{self.split}] row {i}", i)


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub's host (HF_ENDPOINT) answers a connection within `timeout` seconds."""
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


@contextmanager
def hub_offline_unless_reachable() -> Iterator[bool]:
    """`datasets` and `huggingface_hub` in offline mode (cached copies only) while the hub cannot be reached: offline,
    they fail at once where they would retry each file five times. Yields whether offline mode was set."""
    import datasets
    from huggingface_hub import constants

    was = (datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE)
    offline = was[0] or not hub_reachable()
    datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = offline  # both read at each call
    try:
        yield offline
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = was


class LocalFile:
    """A local JSONL, CSV or Parquet file, JSONL and CSV gzipped or not (format from the extension unless given)."""

    def __init__(self, path: str, fields: Fields | None = None, format: str | None = None,
                 limit: int | None = None):
        self.path = Path(path).expanduser()
        self.fields = fields or Fields()
        suffixes = [s.lstrip(".").lower() for s in self.path.suffixes] or [""]
        suffix = suffixes[-2] if suffixes[-1] == "gz" and len(suffixes) > 1 else suffixes[-1]  # the reader gunzips
        formats = {"json": "jsonl", "jsonl": "jsonl", "csv": "csv", "parquet": "parquet"}
        self.format = format or formats.get(suffix, suffix)
        self.limit = limit
        if self.format not in ("jsonl", "csv", "parquet"):
            raise DataError(f"{self.path}: unknown format {self.format!r} (expected jsonl, csv or parquet)")

    def __str__(self) -> str:
        return str(self.path)

    def records(self) -> Iterator[Record]:
        if not self.path.exists():
            raise DataError(f"{self.path}: no such file")
        rows = {"jsonl": self._jsonl, "csv": self._csv, "parquet": self._parquet}[self.format]()
        for i, (where, row) in enumerate(rows):
            if self.limit is not None and i >= self.limit:
                return
            yield self.fields.record(row, where, i)

    def _jsonl(self) -> Iterator[tuple[str, dict]]:
        return ((row.where, row.data) for row in jsonl_rows(self.path))

    def _csv(self) -> Iterator[tuple[str, dict]]:
        return ((row.where, row.data) for row in csv_rows(self.path))

    def _parquet(self) -> Iterator[tuple[str, dict]]:
        import pandas as pd  # deferred: only Parquet files need it
        for i, row in enumerate(pd.read_parquet(self.path).to_dict(orient="records")):
            yield f"{self.path} row {i}", row


def read_id_list(path: str | Path) -> set[str]:
    """Ids from the first column of a text/TSV/CSV file; a header line named `id` is skipped."""
    path = Path(path).expanduser()
    if not path.exists():
        raise DataError(f"{path}: id exclusion file not found")
    ids = set()
    for _, line in numbered_lines(path):
        first = line.replace(",", "\t").split("\t")[0].strip()
        if first and first != "id":
            ids.add(first)
    return ids
