"""Score files of summaries with any rewards, through the same batched code path as training.

Shared by `scripts/score.py` and `scripts/correlate.py`:
  - `read_jsonl` / `Row`: JSONL input whose errors name the file, line and field;
  - `compose_rewards`: rewards chosen by the names of their configs in `conf/reward/`, built with
    Hydra's compose API, so any reward config (and any override of it) works;
  - `score_texts`: tokenize, build a vocabulary of every word being scored (nothing maps to <unk>)
    and call each reward on `RewardInput.from_texts` batches;
  - `add_scoring_arguments` / `score_rows`: the command-line flags both scripts share, and their use.
"""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, OverrideParseException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from models.text.records import DataError, numbered_lines
from models.text.vocab import SENTENCE_END, Vocabulary, tokenize_sentences
from rewards.base import Reward, RewardInput

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"

# treebank: raw text, PTB-tokenized after sentence splitting (`tokenize_sentences(pretokenized=False)`).
# whitespace: text that is already tokenized, split on whitespace (`pretokenized=True`).
# rouge_package: as the `rouge` package (pltrdy) reads text for Wu et al. (2020): case kept, split on '.' and
# whitespace, one sentence.
TOKENIZERS = ("treebank", "whitespace", "rouge_package")

# Clark et al. (2019) print ROUGE x100 and mover's similarities x1000.
_MOVER_NAMES = ("wms", "sms", "s_wms")


class InputError(ValueError):
    """Bad input: a malformed record (the message says file, line and field) or a flag naming
    something that does not exist."""


# What a command line reports as one line instead of a traceback (DataError: a missing or undecodable file).
USER_ERRORS = (InputError, DataError, ConfigCompositionException, OverrideParseException)


@dataclass(frozen=True)
class Row:
    """One JSONL record and where it came from, so that every complaint can point at it."""

    path: str
    line: int
    data: dict[str, Any]

    def error(self, message: str) -> InputError:
        return InputError(f"{self.path}, line {self.line}: {message}")

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


def read_jsonl(path: str | Path) -> list[Row]:
    """Every non-blank line of a JSONL file, each a JSON object."""
    rows = []
    for number, line in numbered_lines(path):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}, line {number}: invalid JSON ({e.msg}, column {e.colno})") from None
        row = Row(str(path), number, data)
        if not isinstance(data, dict):
            raise row.error(f"expected a JSON object, got {type(data).__name__}")
        rows.append(row)
    if not rows:
        raise InputError(f"{path}: no records")
    return rows


def parse_exclusions(values: Sequence[str]) -> list[tuple[str, str]]:
    """`--exclude FIELD=VALUE ...` as (field, value) pairs (see `Row.matches`)."""
    pairs = []
    for value in values:
        field, sep, target = value.partition("=")
        if not sep or not field:
            raise InputError(f"--exclude wants FIELD=VALUE, got {value!r}")
        pairs.append((field, target))
    return pairs


def parse_reward_spec(spec: str) -> tuple[str, str]:
    """`NAME` or `LABEL=NAME` -> (label, config name). A label lets one config appear twice."""
    label, _, config = spec.rpartition("=")
    return (label or config), config


def compose_rewards(specs: Sequence[str], overrides: Sequence[str] = (),
                    config_dir: str | Path = CONF_DIR) -> dict[str, Reward]:
    """Build rewards from `conf/reward/<name>.yaml`, keyed by label.

    Each reward is composed under its label, so overrides read `LABEL.key=value`
    (`rouge_l.beta=1.2`, `wms.embeddings.path=...`); any Hydra override syntax works.
    """
    pairs = [parse_reward_spec(s) for s in specs]
    labels = [label for label, _ in pairs]
    if len(set(labels)) != len(labels):
        raise InputError(f"reward labels must be unique, got {labels}; name copies LABEL=CONFIG")
    with initialize_config_dir(version_base="1.3", config_dir=str(Path(config_dir).resolve()),
                               job_name="score"):
        cfg = compose(overrides=[f"+reward@{label}={config}" for label, config in pairs] + list(overrides))
    for label, config in pairs:
        if "_target_" not in cfg[label]:  # e.g. `mle`, which selects MLE training rather than a reward
            raise InputError(f"conf/reward/{config}.yaml does not define a reward (no _target_)")
    return {label: instantiate(cfg[label]) for label in labels}


def display_scale(reward: Reward) -> int:
    """The factor the papers print a reward's mean with: ROUGE and QA metrics x100, mover's metrics x1000."""
    if reward.name.startswith(("rouge", "qa_")):
        return 100
    return 1000 if reward.name in _MOVER_NAMES else 1


def tokenize(text: str, tokenizer: str) -> list[list[str]]:
    """Sentences of tokens, lower-cased but for `rouge_package` (see TOKENIZERS)."""
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {tokenizer!r}; choose from {TOKENIZERS}")
    if tokenizer == "rouge_package":
        return [[word for piece in text.split(".") for word in piece.split()]]
    return tokenize_sentences(text, pretokenized=tokenizer == "whitespace")


def hypothesis_tokens(sentences: list[list[str]]) -> list[str]:
    """Flatten a hypothesis. Rewards find hypothesis sentences at sentence-final tokens (as in a
    decoded summary), so a sentence that is followed by another but lacks one gets a '.'."""
    tokens: list[str] = []
    for i, sentence in enumerate(sentences):
        tokens += sentence
        if i < len(sentences) - 1 and sentence and sentence[-1] not in SENTENCE_END:
            tokens.append(".")
    return tokens


@torch.no_grad()
def score_texts(rewards: Mapping[str, Reward], candidates: Sequence[str], references: Sequence[str | None],
                sources: Sequence[str] | None = None, tokenizers: str | Mapping[str, str] = "treebank",
                batch_size: int = 64, device: str | torch.device = "cpu") -> dict[str, list[float | None]]:
    """Each reward's score of each candidate; None where a reference-based reward does not apply (no
    reference, or NaN: a reference with nothing to compare, see `rewards.base.Reward`).

    `tokenizers` is one tokenizer for all rewards or one per reward label. Rewards sharing a
    tokenizer share the tokenized texts, the vocabulary and the batches.
    """
    if isinstance(tokenizers, str):
        tokenizers = dict.fromkeys(rewards, tokenizers)
    if len(references) != len(candidates) or (sources is not None and len(sources) != len(candidates)):
        raise ValueError("candidates, references and sources must have the same length")
    scores: dict[str, list[float | None]] = {label: [] for label in rewards}
    for tokenizer in sorted(set(tokenizers[label] for label in rewards)):
        labels = [label for label in rewards if tokenizers[label] == tokenizer]
        hyps = [hypothesis_tokens(tokenize(c, tokenizer)) for c in candidates]
        refs = [None if r is None else tokenize(r, tokenizer) for r in references]
        srcs = None if sources is None else [[t for s in tokenize(x, tokenizer) for t in s] for x in sources]
        words = {t for h in hyps for t in h}
        words |= {t for r in refs if r for s in r for t in s}
        words |= {t for x in srcs or [] for t in x}
        vocab = Vocabulary(sorted(words))
        for start in range(0, len(candidates), batch_size):
            window = slice(start, start + batch_size)
            inputs = RewardInput.from_texts(hyps[window], refs[window], vocab,
                                            None if srcs is None else srcs[window], device=device,
                                            source_texts=None if sources is None else list(sources[window]))
            for label in labels:
                values = rewards[label](inputs).float().cpu().tolist()
                if rewards[label].needs_reference:
                    values = [None if r is None or math.isnan(v) else v for v, r in zip(values, refs[window])]
                scores[label] += values
    return scores


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_scoring_arguments(parser: argparse.ArgumentParser, candidate_field: str = "candidate") -> None:
    """Flags that choose the rewards, the input fields and the tokenization."""
    available = sorted(p.stem for p in (CONF_DIR / "reward").glob("*.yaml") if "_target_" in OmegaConf.load(p))
    g = parser.add_argument_group("scoring")
    g.add_argument("--rewards", nargs="+", required=True, metavar="[LABEL=]NAME",
                   help=f"rewards by config name in conf/reward/ (available: {', '.join(available) or 'none'}); "
                        "LABEL=NAME scores one config twice under different labels")
    g.add_argument("--set", nargs="+", action="extend", default=[], metavar="LABEL.KEY=VALUE",
                   help="Hydra overrides of the reward configs, e.g. rouge_l.beta=1.2")
    g.add_argument("--tokenize", nargs="+", default=["treebank"], metavar="[LABEL=]MODE",
                   help="tokenizer for all rewards, then per-reward exceptions: 'treebank' (raw text, PTB "
                        "tokens) or 'whitespace' (pretokenized text); e.g. --tokenize treebank rouge_l=whitespace")
    g.add_argument("--candidate-field", default=candidate_field)
    g.add_argument("--reference-field", default="reference",
                   help="null values are allowed: reference-based rewards then score null")
    g.add_argument("--source-field", default=None, help="source articles, for rewards that read them")
    g.add_argument("--batch-size", type=positive_int, default=64)
    g.add_argument("--device", default="cpu")


def tokenizers_from_arguments(values: Sequence[str], labels: Sequence[str]) -> dict[str, str]:
    """Resolve `--tokenize treebank rouge_l=whitespace` into one tokenizer per reward label."""
    default, per_label = "treebank", {}
    for value in values:
        label, _, mode = value.rpartition("=")
        if mode not in TOKENIZERS:
            raise InputError(f"--tokenize: unknown tokenizer {mode!r}; choose from {TOKENIZERS}")
        if not label:
            default = mode
        elif label not in labels:
            raise InputError(f"--tokenize: {label!r} is not one of the rewards {list(labels)}")
        else:
            per_label[label] = mode
    return {label: per_label.get(label, default) for label in labels}


def score_rows(args: argparse.Namespace, rows: Sequence[Row]
               ) -> tuple[dict[str, Reward], dict[str, list[float | None]]]:
    """Compose the rewards named by the flags and score the rows' fields with them."""
    # Read the fields first: a bad row should fail before the rewards load their embeddings.
    candidates = [row.text(args.candidate_field) for row in rows]
    references = [row.text(args.reference_field, nullable=True) for row in rows]
    sources = None if args.source_field is None else [row.text(args.source_field) for row in rows]
    rewards = compose_rewards(args.rewards, args.set)
    tokenizers = tokenizers_from_arguments(args.tokenize, list(rewards))
    scores = score_texts(rewards, candidates, references, sources, tokenizers, args.batch_size, args.device)
    return rewards, scores


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table, first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
