"""The staged sweeper: a grid's MLE points run in batches before every point that starts from one, whatever the order
of the command's overrides (with a parallel launcher, Hydra's basic sweeper would start a seed's mixed runs beside its
MLE run)."""
from hydra.core.override_parser.overrides_parser import OverridesParser

from hydra_plugins.sumrl_sweeper.staged_sweeper import StagedSweeper


def batches(arguments: list[str], max_batch_size: int | None) -> list[list[list[str]]]:
    overrides = OverridesParser.create().parse_overrides(arguments)
    # not instantiated: Hydra's plugin scan (other tests compose configs) re-executes the module of BasicSweeper
    return StagedSweeper.split_arguments(overrides, max_batch_size)


def rewards(batch: list[list[str]]) -> list[str]:
    return [next(o for o in point if o.startswith("reward=")) for point in batch]


def test_mle_points_come_first_whatever_the_order_of_the_overrides():
    for arguments in (["reward=mle,rouge_l,sms", "seed=0,1"], ["seed=0,1", "reward=rouge_l,mle,sms"]):
        stages = batches(arguments, None)
        assert [sorted(rewards(stage)) for stage in stages] == [["reward=mle"] * 2,
                                                                ["reward=rouge_l"] * 2 + ["reward=sms"] * 2]
        assert sorted(sorted(point) for stage in stages for point in stage) == sorted(
            sorted([f"reward={r}", f"seed={s}"]) for r in ("mle", "rouge_l", "sms") for s in (0, 1))


def test_a_batch_never_mixes_an_mle_point_with_the_points_after_it():
    """One seed in batches of two: Hydra's basic sweeper would pair the MLE point with its first mixed point."""
    stages = batches(["reward=mle,rouge_l,wms,sms", "seed=0"], 2)
    assert [rewards(batch) for batch in stages] == [["reward=mle"], ["reward=rouge_l", "reward=wms"], ["reward=sms"]]


def test_a_sweep_without_mle_points_is_one_stage():
    assert [rewards(batch) for batch in batches(["reward=rouge_l,sms", "seed=0,1"], None)] == [
        ["reward=rouge_l", "reward=rouge_l", "reward=sms", "reward=sms"]]
