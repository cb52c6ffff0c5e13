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


def test_grpo_trains_a_tiny_language_model_on_a_sumrl_reward(tmp_path):
    """The GUIDE's example, run: TRL's GRPOTrainer calls the reward on its completions and logs what it returned (a
    tiny GPT-2 built from a config and a word-level tokenizer: no download). Skipped where TRL is not installed."""
    trl = pytest.importorskip("trl")
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    words = ["<pad>", "<eos>", "<unk>", *"the cat sat on a mat dog barked at night it slept . summarize :".split()]
    tokens = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokens.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tokens, pad_token="<pad>", eos_token="<eos>",
                                        unk_token="<unk>")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(words), n_positions=64, n_embd=16, n_layer=1, n_head=2,
                                       pad_token_id=0, eos_token_id=1, bos_token_id=1))
    dataset = Dataset.from_dict({"prompt": ["summarize : the cat sat on a mat ."] * 4,
                                 "reference": ["the cat sat on a mat ."] * 4})
    returned = []

    class Recorded(TRLReward):
        def __call__(self, completions, **columns):
            returned.append(super().__call__(completions, **columns))
            return returned[-1]

    args = trl.GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2,
                          max_completion_length=8, max_steps=2, learning_rate=1e-3, logging_steps=1, report_to=[],
                          use_cpu=True, save_strategy="no", beta=0.0)
    trainer = trl.GRPOTrainer(model=model, reward_funcs=[Recorded("rouge_l")], args=args, train_dataset=dataset,
                              processing_class=tokenizer)
    trainer.train()
    logged = [h["rewards/rouge_l/mean"] for h in trainer.state.log_history if "rewards/rouge_l/mean" in h]
    assert len(returned) == len(logged) == 2 and all(len(r) == 4 for r in returned)
    assert logged == pytest.approx([sum(r) / len(r) for r in returned], abs=1e-6)
