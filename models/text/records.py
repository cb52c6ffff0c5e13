"""Record files read line by line, with errors that name the file, the line and the field (the one reader that
training, scoring, table4 and the benches use), and files written whole or not at all."""
from __future__ import annotations

import csv
import gzip
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator


class DataError(ValueError):
    """Bad input data; the message names the file (or dataset), the line (or row) and the field."""


def numbered_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number from 1, text) of each line of a UTF-8 file, gzipped if it ends in .gz, past a byte order mark
    opening it (as spreadsheet programs save CSV: it would become part of the first field's name). Invalid UTF-8 is
    reported by file and line: the decoder's own error gives a byte offset into a buffer."""
    try:
        f = gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")
    except OSError as e:
        raise DataError(f"{path}: {e.strerror}") from None
    with f:
        for number, raw in enumerate(f, start=1):
            try:
                yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{number}: invalid UTF-8 (byte {e.start + 1} of the line)") from None


@dataclass(frozen=True)
class Row:
    """One record and where it came from, so that every complaint can point at it."""

    path: str
    line: int
    data: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    def error(self, message: str) -> DataError:
        return DataError(f"{self.where}: {message}")

    def value(self, field: str) -> Any:
        """A field's value, which must be present."""
        if field not in self.data:
            raise self.error(f"no field {field!r} (fields: {', '.join(self.data)})")
        return self.data[field]

    def text(self, field: str, nullable: bool = False) -> str | None:
        value = self.value(field)
        if isinstance(value, str) or (value is None and nullable):
            return value
        raise self.error(f"field {field!r} must be a string, got {json.dumps(value)[:60]}")

    def number(self, field: str) -> float | None:
        """A numeric field; null (no judgment) stays None."""
        value = self.value(field)
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        raise self.error(f"field {field!r} must be a finite number or null, got {json.dumps(value)[:60]}")

    def matches(self, field: str, value: str) -> bool:
        """Whether `field` equals `value`, non-strings compared in their JSON spelling (null, 1, true)."""
        actual = self.value(field)
        return (actual if isinstance(actual, str) else json.dumps(actual)) == value


def jsonl_rows(path: str | Path) -> Iterator[Row]:
    """Each non-blank line of a JSONL file, a JSON object."""
    for number, line in numbered_lines(path):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{number}: malformed JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(data, dict):
            raise DataError(f"{path}:{number}: expected an object with fields, got {type(data).__name__}")
        yield Row(str(path), number, data)


def csv_rows(path: str | Path) -> Iterator[Row]:
    """Each record of a CSV file with a header line; a record's line is the line it ends on."""
    reader = csv.DictReader(line for _, line in numbered_lines(path))
    try:
        for data in reader:
            if None in data:  # DictReader's key for the values beyond the header's names
                raise DataError(f"{path}:{reader.line_num}: more values than the header's "
                                f"{len(reader.fieldnames)} field names")
            yield Row(str(path), reader.line_num, data)
    except csv.Error as e:
        raise DataError(f"{path}:{reader.line_num}: malformed CSV ({e})") from None


def read_jsonl(path: str | Path) -> list[Row]:
    """Every record of a JSONL file, which must hold at least one."""
    rows = list(jsonl_rows(path))
    if not rows:
        raise DataError(f"{path}: no records")
    return rows


def write_text(path: str | Path, text: str) -> None:
    """`text` into `path` (UTF-8), whole or not at all (`atomic_write`)."""
    atomic_write(path, lambda partial: partial.write_text(text, encoding="utf-8"))


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> None:
    """`write(partial)` beside `path`, then a rename over it: a reader (or a kill mid-write) never sees half a file."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    try:
        write(partial)
        os.replace(partial, path)
    except BaseException:  # a full disk, a kill's exception: no half-written file left beside the whole one
        partial.unlink(missing_ok=True)
        raise
