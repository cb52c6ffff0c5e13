"""Rewards outside this trainer: `score_strings` scores plain strings with any reward config, and `TRLReward` gives
a reward TRL's reward-function convention (`completions`, the dataset's columns by name, a list back)."""
import inspect

import pytest

from rewards.configs import RewardConfigError, score_strings
from rewards.for_trl import TRLReward

SUMMARIES = ["The cat sat on the mat.", "A dog barked at night. It slept."]
REFERENCES = ["A cat sat on a mat.", "The dog slept all night."]


def test_score_strings_scores_plain_text_as_the_reward_does():
    # by hand, on PTB tokens (the full stop is a token): "cat sat on mat ." of 7 and 7 tokens, F = 5/7; "dog slept ."
    # (or "dog night .") of 9 and 6, P 1/3, R 1/2, F = 0.4
    assert score_strings("rouge_l", SUMMARIES, REFERENCES) == pytest.approx([5 / 7, 0.4], abs=1e-6)
    assert score_strings("rouge_l", SUMMARIES, [None, REFERENCES[1]])[0] is None  # no reference: does not apply
    with pytest.raises(TypeError, match=r"summaries must be a list of strings, got one string: \['the cat'\]"):
        score_strings("rouge_l", "the cat", ["the cat"])  # scored 7 characters as 7 summaries


def test_score_strings_names_a_config_that_does_not_exist():
    with pytest.raises(RewardConfigError, match="no reward config 'rouge_x': choose from "):
        score_strings("rouge_x", SUMMARIES, REFERENCES)


def test_trl_reward_follows_trls_reward_function_convention():
    reward = TRLReward("rouge_l")
    parameters = inspect.signature(reward).parameters
    assert list(parameters)[0] == "completions" and parameters["columns"].kind is inspect.Parameter.VAR_KEYWORD
    assert reward.__name__ == "rouge_l"  # TRL logs rewards/<__name__>
    plain = reward(completions=SUMMARIES, prompts=["p", "q"], reference=REFERENCES, article=["x", "y"])
    chat = reward(completions=[[{"role": "assistant", "content": s}] for s in SUMMARIES], reference=REFERENCES)
    assert plain == chat == score_strings("rouge_l", SUMMARIES, REFERENCES)
    assert all(isinstance(v, float) for v in plain)
    with pytest.raises(KeyError, match="needs a 'reference' column"):
        reward(completions=SUMMARIES, summary=REFERENCES)
    assert TRLReward("rouge_l", reference="summary")(completions=SUMMARIES, summary=REFERENCES) == plain
