"""Rewards built from their Hydra configs (`conf/reward/<name>.yaml`, or a user's `--config-dir`), and any reward
scoring plain strings: what the command-line tools, the benches and code outside this trainer (`rewards.for_trl`)
share."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from hydra import compose, initialize_config_module
from hydra.errors import InstantiationException
from hydra.utils import instantiate

from rewards.base import NotAReward, Reward, check_reward
from rewards.names import CONF, parse_reward_spec, reward_configs, search_path
from rewards.scoring import score_texts


class RewardConfigError(ValueError):
    """A reward config that does not exist or does not define a reward."""


class ConfigRefused(ValueError):
    """A configured object whose constructor refused a setting with a plain ValueError: its own one-line message."""


def instantiate_or_refuse(config, **kwargs):
    """`instantiate`, where an object refusing its settings or files says its own message rather than Hydra's wrapper
    around it: a typed refusal (DataError, CheckpointError, NotAReward, ...) is raised as itself, a plain ValueError as
    ConfigRefused, so that a command line knows it for a user error."""
    try:
        return instantiate(config, **kwargs)
    except InstantiationException as error:
        cause = error.__cause__
        if type(cause) is ValueError:
            raise ConfigRefused(str(cause)) from None
        if isinstance(cause, (ValueError, NotAReward)):
            raise cause from None
        raise


def compose_rewards(specs: Sequence[str], overrides: Sequence[str] = (),
                    config_dirs: Sequence[str | Path] = ()) -> dict[str, Reward]:
    """Build rewards from `conf/reward/<name>.yaml` (a `config_dirs` folder's first), keyed by label.

    Each reward is composed under its label, so overrides read `LABEL.key=value`
    (`rouge_l.beta=1.2`, `wms.embeddings.path=...`); any Hydra override syntax works.
    """
    pairs = [parse_reward_spec(s) for s in specs]
    known = reward_configs(config_dirs)
    for _, config in pairs:
        if config not in known and config != "mle":  # mle: named below as no reward
            raise RewardConfigError(f"no reward config {config!r}: choose from {', '.join(known)}")
    labels = [label for label, _ in pairs]
    if len(set(labels)) != len(labels):
        raise RewardConfigError(f"reward labels must be unique, got {labels}; name copies LABEL=CONFIG")
    with initialize_config_module(version_base="1.3", config_module=CONF, job_name="score"):
        cfg = compose(overrides=[f"+reward@{label}={config}" for label, config in pairs] + list(overrides)
                      + search_path(config_dirs))
    for label, config in pairs:
        if "_target_" not in cfg[label]:  # e.g. `mle`, which selects MLE training rather than a reward
            raise RewardConfigError(f"conf/reward/{config}.yaml does not define a reward (no _target_)")
    rewards = {label: instantiate_or_refuse(cfg[label]) for label in labels}
    for label, config in pairs:
        check_reward(rewards[label], f"conf/reward/{config}.yaml")
    return rewards


def build_reward(reward: str | Reward, overrides: Sequence[str] = ()) -> Reward:
    """A reward from its config name (with Hydra `overrides` of it), or `reward` itself if already built."""
    return compose_rewards([reward], overrides)[parse_reward_spec(reward)[0]] if isinstance(reward, str) else reward


def score_strings(reward: str | Reward, summaries: Sequence[str], references: Sequence[str | None] | None = None,
                  articles: Sequence[str] | None = None, overrides: Sequence[str] = (), tokenizer: str = "treebank",
                  device: str = "cpu") -> list[float | None]:
    """One reward's score of each summary, as plain strings: `reward` a config name (`"sms"`, `"qa_learned"`, with
    Hydra `overrides` of it such as `"sms.embeddings.path=..."`) or a built reward. `references` for the rewards that
    compare with one, `articles` for those that read the article (QA, LS-Score). Raw text is split into sentences and
    PTB-tokenized (`tokenizer="whitespace"` for tokenized text). None where the reward does not apply (no reference).

        score_strings("rouge_l", ["the cat sat ."], ["a cat sat on the mat ."])
    """
    for name, texts in (("summaries", summaries), ("references", references), ("articles", articles)):
        if isinstance(texts, str):  # a string is a sequence of characters: each would be scored as a summary
            raise TypeError(f"score_strings: {name} must be a list of strings, got one string: [{texts[:30]!r}]")
    built = build_reward(reward, overrides)
    references = [None] * len(summaries) if references is None else references
    return score_texts({"reward": built}, summaries, references, articles, tokenizer, device=device)["reward"]
