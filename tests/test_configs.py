"""Every config in conf/ composes, and every class it names instantiates."""
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import OmegaConf

import trainer.folders  # noqa: F401  (registers the resolvers conf/train.yaml names)
from conftest import write_selector_checkpoint
from models.text.vocab import Vocabulary

CONF = Path(__file__).resolve().parents[1] / "conf"
BASE = ["output_dir=/tmp/sumrl-test", "run_name=test", "cache_dir=/tmp/sumrl-test-cache"]


@pytest.fixture(autouse=True)
def _unset_hydra_config():
    yield
    HydraConfig.instance().cfg = None  # other tests run outside Hydra, as they would


def options(group):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def compose_train(overrides):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("train", overrides=BASE + overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # ${hydra:runtime.choices.*} resolves as in a run (conf/logger/wandb.yaml)
    return cfg


@pytest.mark.parametrize("group", ["data", "model", "optimizer", "reward", "gamma", "logger", "callbacks"])
def test_group_options_compose_and_instantiate(group, tmp_path, tiny_qa_model, tiny_ls_score, monkeypatch):
    monkeypatch.setenv("SUMRL_QA_MODEL", tiny_qa_model)  # the QA rewards' model (conf/qa/default.yaml)
    monkeypatch.setenv("SUMRL_LS_SCORE", tiny_ls_score)  # conf/reward/ls_score.yaml's checkpoint
    for option in options(group):
        overrides = [f"{group}={option}"]
        if option == "local":
            overrides.append(f"data.train.path={tmp_path / 'd.jsonl'}")
        if option == "bottom_up":
            vocab = Vocabulary([f"w{i}" for i in range(96)])  # 100 entries with the specials, as below
            overrides.append(f"model.selector.path={write_selector_checkpoint(tmp_path / 'selector.ckpt', vocab)}")
        cfg = compose_train(overrides)
        node = {"data": cfg.data, "model": cfg.model, "optimizer": cfg.optimizer, "reward": cfg.reward,
                "gamma": cfg.gamma, "logger": cfg.logger, "callbacks": cfg.callbacks}[group]
        if node is None:  # reward=mle: no reward
            assert option == "mle" and cfg.stage == "mle"
            continue
        if group == "model":
            node = OmegaConf.merge(node, {"config": {"vocab_size": 100}})
        obj = instantiate(node)
        if group == "optimizer":
            obj = obj([torch.nn.Parameter(torch.zeros(1))])
        assert obj is not None


def test_trainer_options_compose():
    for option in options("trainer"):
        cfg = compose_train([f"trainer={option}"])
        assert cfg.trainer._target_ == "pytorch_lightning.Trainer"
    trainer = instantiate(compose_train(["trainer=default"]).trainer, logger=False, enable_progress_bar=False)
    assert trainer.max_epochs == 10


@pytest.mark.parametrize("experiment", options("experiment"))
@pytest.mark.parametrize("reward", ["mle", "sms"])
def test_experiments_compose_with_stage_settings(experiment, reward):
    cfg = compose_train([f"experiment={experiment}", f"reward={reward}", "mle_checkpoint=/x/best.ckpt"])
    assert cfg.stage == ("mle" if reward == "mle" else "mixed")
    assert cfg.monitor.metric == ("val/loss" if reward == "mle" else f"val/{cfg.select_by}")
    assert cfg.module.select_by == cfg.select_by
    assert cfg.init_from == (None if reward == "mle" else "/x/best.ckpt")
    module_cfg = OmegaConf.to_container(cfg.module, resolve=True)
    assert module_cfg["optimizer"]["lr"] == cfg.stages[cfg.stage].lr


def summarizer(overrides):
    from models.pointer_generator import PointerGenerator, PointerGeneratorConfig
    return instantiate(compose_train(overrides).module, model=PointerGenerator(PointerGeneratorConfig(vocab_size=10)),
                       vocab=Vocabulary([]), output_dir="/tmp/x")


def test_module_config_instantiates_with_reward_and_metrics():
    module = summarizer(["reward=rouge_l_sms"])
    assert module.reward.name and set(module.metrics) == {"wms", "sms", "s_wms"}


def test_the_repeat_penalty_and_the_decoding_rules_are_configured():
    from models.decoding import BlockRepeatedTrigrams, MinLength
    from rewards.repeats import RepeatPenalty
    from rewards.rouge import RougeL

    module = summarizer(["experiment=demo_grid", "reward=rouge_l", "module.beam.processors.min_length.min_len=3",
                         "rl.penalize_repeats=true"])
    assert isinstance(module.reward, RepeatPenalty) and isinstance(module.reward.wrapped, RougeL)
    assert isinstance(summarizer(["reward=rouge_l"]).reward, RougeL)  # blind (default): ROUGE-L sees repeats
    assert isinstance(summarizer(["reward=wms"]).reward, RepeatPenalty)
    assert isinstance(summarizer(["reward=rouge_l_sms"]).reward, RepeatPenalty)  # SMS, one of its terms, is blind
    with pytest.raises(Exception, match="rl.penalize_repeats must be true, false or blind"):
        summarizer(["reward=rouge_l", "rl.penalize_repeats=sometimes"])
    assert [type(p) for p in module.beam["processors"]] == [MinLength, BlockRepeatedTrigrams]
    assert module.beam["processors"][0].min_len == 3
    plain = summarizer(["reward=rouge_l", "rl.penalize_repeats=false", "module.beam.processors.min_length=null"])
    assert isinstance(plain.reward, RougeL) and plain.beam["processors"] == []
    assert summarizer(["reward=mle"]).reward is None


def test_content_selector_config_brings_its_module_and_stage():
    from models.bottom_up import ContentSelector
    from trainer.selector_module import ContentSelectorModule
    from models.text.vocab import Vocabulary

    cfg = compose_train(["model=content_selector", "module.glove=false"])
    assert (cfg.stage, cfg.monitor.metric, cfg.monitor.mode, cfg.init_from) == ("selector", "val/loss", "min", None)
    model = instantiate(OmegaConf.merge(cfg.model, {"config": {"vocab_size": 10}}))
    module = instantiate(cfg.module, model=model, vocab=Vocabulary([]), output_dir="/tmp/x")
    assert isinstance(model, ContentSelector) and isinstance(module, ContentSelectorModule)
    assert module.optimizer_factory.keywords["lr"] == cfg.stages.selector.lr


@pytest.mark.parametrize("stage,overrides", [("mle", ["reward=mle"]), ("mixed", ["reward=rouge_l"]),
                                             ("selector", ["model=content_selector"])])
def test_the_stage_settings_the_readme_names_work_in_a_single_run(stage, overrides):
    cfg = compose_train([*overrides, f"stages.{stage}.steps=4", f"stages.{stage}.val_every=2",
                         f"stages.{stage}.lr=0.5"])
    assert cfg.stage == stage
    assert (cfg.trainer.max_steps, cfg.trainer.val_check_interval, cfg.optimizer.lr) == (4, 2, 0.5)
    default = compose_train(overrides).trainer
    assert (default.max_steps, default.val_check_interval, default.max_epochs) == (-1, 1.0, 10)  # as Lightning's


def test_train_help_lists_the_config_groups_and_the_main_settings():
    import subprocess
    import sys
    shown = subprocess.run([sys.executable, "-m", "trainer.train", "--help"], cwd=CONF.parent, capture_output=True,
                           text=True, check=True).stdout
    assert shown.startswith("sumrl-train")
    groups = {line.split(":")[0] for line in shown.splitlines() if ": " in line}
    assert {"data", "model", "reward", "gamma", "rl/baseline", "logger", "experiment"} <= groups
    assert {"reward: " + ", ".join(options("reward"))} <= set(shown.splitlines())
    for setting in ("stages.<mle|mixed>.steps", "stages.<mle|mixed>.val_every", "rl.samples", "select_by"):
        assert setting in shown


def test_a_refused_config_says_its_own_error_typed_as_it_was_raised():
    import json
    from rewards.configs import ConfigRefused, instantiate_or_refuse
    with pytest.raises(ConfigRefused, match="invalid literal for int"):  # a plain ValueError: a user error
        instantiate_or_refuse({"_target_": "builtins.int", "_args_": ["x"]})
    with pytest.raises(json.JSONDecodeError) as typed:  # a typed refusal keeps its type for its callers
        instantiate_or_refuse({"_target_": "json.loads", "_args_": ["{"]})
    assert not isinstance(typed.value, ConfigRefused)
