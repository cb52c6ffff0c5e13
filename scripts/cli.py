"""What the command-line tools share: the configs they compose (shipped in the package, plus a user's
`--config-dir`), the flags that choose rewards and read a file of summaries, and one-line reports of user errors.

  - `add_scoring_arguments` / `score_rows`: the flags `score` and `correlate` share, and their use (rewards chosen by
    the names of their configs in `conf/reward/` or a `--config-dir`, built by `rewards.configs.compose_rewards`);
  - `command`: a console command that reports bad input in one line instead of a traceback.

The commands import torch and the project's floors where they are used, after their flags are parsed: `--help` and a
bad flag answer at once instead of after seconds of imports (tests/test_scripts.py keeps it so).
"""
from __future__ import annotations

import argparse
import functools
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from hydra.errors import ConfigCompositionException, OverrideParseException

from rewards.names import CONF, TOKENIZERS, parse_reward_spec, reward_configs

if TYPE_CHECKING:
    from models.text.batch import Example
    from models.text.records import Row
    from rewards.base import Reward


class InputError(ValueError):
    """A flag naming something that does not exist, or asking for something that cannot be done."""


def user_errors() -> tuple[type[Exception], ...]:
    """What a command line reports as one line instead of a traceback: sumrl-train's refusals (DataError: a bad,
    missing or undecodable file), runs table4 cannot compare, a flag that cannot serve, an override Hydra cannot
    read."""
    from evaluation.runs import EvaluationRefused  # Lightning: imported once an error needs sorting, not for --help
    from trainer.settings import REFUSALS
    return (InputError, *REFUSALS, EvaluationRefused, ConfigCompositionException, OverrideParseException)


def command(main: Callable[[], Any]) -> Callable[[], None]:
    """A console command running `main()`: a user error ends it with one line, `error: ...`, and status 1; a reader
    that stops early (`| head`) ends it quietly, with status 0 (its files are written before it prints)."""
    @functools.wraps(main)
    def run() -> None:
        try:
            main()
            sys.stdout.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's own flush is quiet
            sys.exit(0)
        except Exception as error:
            if isinstance(error, InputError) or isinstance(error, user_errors()):
                sys.exit(f"error: {error}")
            raise
    return run


def output_file(parser: argparse.ArgumentParser, path: Path, flag: str, source: Path | None = None) -> Path:
    """An output file checked before any work: not a folder, not the input, in a folder that exists and can be
    written (by writing to it: permission bits do not bind root). A bad one is `parser.error`, naming the flag."""
    if path.is_dir():
        parser.error(f"{flag} {path} is a folder: give a file name in it")
    if source is not None and path.resolve() == source.resolve():
        parser.error(f"{flag} {path} is the input file, which writing the output would overwrite")
    folder = path.resolve().parent
    if not folder.is_dir():
        parser.error(f"{flag} {path}: its folder {folder} does not exist")
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        parser.error(f"{flag} {path}: cannot write to {folder} ({error.strerror})")
    return path


def metrics_and_paths(values: Sequence[str], config_dirs: Sequence[str | Path] = ()) -> tuple[list[str], list[Path]]:
    """`--metrics NAME ... RUN ...` (argparse hands the paths after the names to the option): a value that names no
    reward config, shipped or in `config_dirs`, but an existing path, is a path."""
    known = set(reward_configs(config_dirs))
    names = [v for v in values if parse_reward_spec(v)[1] in known or not Path(v).exists()]
    return names, [Path(v) for v in values if v not in names]


def load_splits(overrides: Sequence[str]) -> tuple[dict[str, list[Example]], str]:
    """The train and validation examples of a data config, split exactly as training splits them, and its data
    directory: what the scripts that train frozen reward models (QA, LS-Score) learn from."""
    from hydra import compose, initialize_config_module

    from rewards.configs import instantiate_or_refuse
    with initialize_config_module(version_base="1.3", config_module=CONF):
        cfg = compose(config_name="train", overrides=list(overrides))
    data = instantiate_or_refuse(cfg.data)
    data.setup()
    return data.splits, str(cfg.data_dir)


def seeded(threads: int | None, seed: int) -> random.Random:
    """Set torch's threads and seed as a training script starts; its own generator for what it draws."""
    import torch
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    return random.Random(seed)


def parse_exclusions(values: Sequence[str]) -> list[tuple[str, str]]:
    """`--exclude FIELD=VALUE ...` as (field, value) pairs (see `Row.matches`)."""
    pairs = []
    for value in values:
        field, sep, target = value.partition("=")
        if not sep or not field:
            raise InputError(f"--exclude wants FIELD=VALUE, got {value!r}")
        pairs.append((field, target))
    return pairs


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least `minimum`."""
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value
    return parse


positive_int = int_at_least(1)


def non_negative_float(text: str) -> float:
    """An argparse type: a float of at least 0 (a weight, where a negative one would reward what it penalises)."""
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text}")
    return value


def add_config_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config-dir", action="append", default=[], metavar="DIR",
                        help="a folder of your own configs (DIR/reward/NAME.yaml ...), searched before the shipped "
                             "ones; repeatable")


def add_scoring_arguments(parser: argparse.ArgumentParser, candidate_field: str = "candidate") -> None:
    """Flags that choose the rewards, the input fields and the tokenization."""
    g = parser.add_argument_group("scoring")
    g.add_argument("--rewards", nargs="+", required=True, metavar="[LABEL=]NAME",
                   help=f"rewards by config name in conf/reward/ (shipped: {', '.join(reward_configs()) or 'none'}); "
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
    add_config_dir_argument(g)


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
    from rewards.configs import compose_rewards
    from rewards.scoring import score_texts
    # Read the fields first: a bad row should fail before the rewards load their embeddings.
    candidates = [row.text(args.candidate_field) for row in rows]
    references = [row.text(args.reference_field, nullable=True) for row in rows]
    sources = None if args.source_field is None else [row.text(args.source_field) for row in rows]
    rewards = compose_rewards(args.rewards, args.set, args.config_dir)
    tokenizers = tokenizers_from_arguments(args.tokenize, list(rewards))
    scores = score_texts(rewards, candidates, references, sources, tokenizers, args.batch_size, args.device)
    return rewards, scores
