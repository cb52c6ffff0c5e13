"""The one writer of result tables: markdown for people (printed, table4.md), CSV for programs."""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from models.text.records import atomic_write


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table, first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def write_csv(path: str | Path, header: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
    """One line per row (a mapping; missing fields stay empty), written whole or not at all."""
    def write(partial: Path) -> None:
        with partial.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, list(header))
            writer.writeheader()
            writer.writerows(rows)
    atomic_write(path, write)
