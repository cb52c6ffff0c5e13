"""The rewards and tokenizers a command line offers, by name, without importing torch: so that `--help` lists them
at once and a misspelt name is refused before any model loads."""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Sequence

from omegaconf import OmegaConf

CONF = "conf"  # the package of the shipped configs, found through Hydra's package search path (pkg://conf)
TOKENIZERS = ("treebank", "whitespace", "rouge_package")  # how rewards.scoring reads raw text


def search_path(config_dirs: Sequence[str | Path]) -> list[str]:
    """Hydra overrides that put a user's config folders on the search path, before the shipped configs."""
    if not config_dirs:
        return []
    return ["hydra.searchpath=[" + ",".join(f"file://{Path(d).expanduser().resolve()}" for d in config_dirs) + "]"]


def reward_configs(config_dirs: Sequence[str | Path] = ()) -> list[str]:
    """The names of the reward configs that define a reward (a `_target_`), shipped or in `config_dirs`."""
    folders = [resources.files(CONF) / "reward", *(Path(d).expanduser() / "reward" for d in config_dirs)]
    return sorted({p.name.removesuffix(".yaml") for folder in folders if folder.is_dir() for p in folder.iterdir()
                   if p.name.endswith(".yaml") and "_target_" in OmegaConf.create(p.read_text(encoding="utf-8"))})


def parse_reward_spec(spec: str) -> tuple[str, str]:
    """`NAME` or `LABEL=NAME` -> (label, config name). A label lets one config appear twice."""
    label, _, config = spec.rpartition("=")
    return (label or config), config
