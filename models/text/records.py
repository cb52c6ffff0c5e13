"""Record files read line by line, with errors that name the file, the line and the field; and files written whole
or not at all."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator


class DataError(ValueError):
    """Bad input data; the message names the file (or dataset), the line (or row) and the field."""


def numbered_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number from 1, text) of each line of a UTF-8 file. Invalid UTF-8 is reported by file and line:
    the decoder's own error gives a byte offset into a buffer."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise DataError(f"{path}: {e.strerror}") from None
    with f:
        for number, raw in enumerate(f, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{number}: invalid UTF-8 (byte {e.start + 1} of the line)") from None
