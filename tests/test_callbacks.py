"""The validation curve's one-line summary, its checkpointed state and its files; a stage that ends on its decodes."""
import csv

import pytest
import torch

from trainer.callbacks import StopWhenDecodesEnd, ValidationCurve

POINTS = [{"step": 0, "seconds": 0.0, "val/reward": 0.50, "val/loss": 2.0},
          {"step": 10, "seconds": 4.0, "val/reward": 0.62, "val/loss": 1.5},
          {"step": 20, "seconds": 8.0, "val/reward": 0.58, "val/loss": 1.7}]


def test_summary_names_start_best_and_delta(tmp_path):
    curve = ValidationCurve("val/reward", "max", str(tmp_path))
    curve.points = list(POINTS)
    assert curve.summary() == "val/reward 0.5000 at step 0 → best 0.6200 at step 10 (Δ +0.1200, 3 validations)"
    lowest = ValidationCurve("val/loss", "min", str(tmp_path))
    lowest.points = list(POINTS)
    assert lowest.summary() == ("val/loss 2.0000 at step 0 → best 1.5000 at step 10 (Δ -0.5000, 3 validations); "
                                "greedy reward 0.5 → 0.62")


def test_summary_shows_the_decodes_at_the_start_and_at_the_best_step(tmp_path):
    curve = ValidationCurve("val/test_metric", "max", str(tmp_path))
    curve.points = [{"step": 0, "val/test_metric": 160.0, "val/beam_length": 70.0, "val/length": 63.0,
                     "val/repeated_trigrams": 0.27},
                    {"step": 50, "val/test_metric": 170.0, "val/beam_length": 80.5, "val/length": 88.0,
                     "val/repeated_trigrams": 0.41},
                    {"step": 100, "val/test_metric": 165.0, "val/beam_length": 90.0, "val/length": 95.0}]
    assert curve.summary() == ("val/test_metric 160.0000 at step 0 → best 170.0000 at step 50 (Δ +10.0000, "
                               "3 validations); beam length 70 → 80.5, greedy length 63 → 88, greedy repeated "
                               "trigrams 0.27 → 0.41")


def test_each_validation_is_a_line_with_the_step_of_the_stage_and_the_minutes_so_far(tmp_path):
    curve = ValidationCurve("val/reward", "max", str(tmp_path / "seed_0" / "rouge_l"), panels=["val/loss"])
    curve.points = [*POINTS, {"step": 150, "seconds": 79.6, "val/reward": 0.6612, "val/loss": 1.25}]
    assert curve.progress(200) == "seed_0/rouge_l, step 150 of 200 (1:20): val/reward 0.6612, val/loss 1.25"
    assert curve.progress(-1).startswith("seed_0/rouge_l, step 150 (1:20): ")  # a stage that max_epochs ends


def test_points_survive_a_checkpoint_and_are_written(tmp_path):
    curve = ValidationCurve("val/reward", "max", str(tmp_path))
    curve.points = list(POINTS)
    resumed = ValidationCurve("val/reward", "max", str(tmp_path))
    resumed.load_state_dict(curve.state_dict())
    assert resumed.points == POINTS
    resumed.write_csv(tmp_path / "val_curve.csv")
    lines = (tmp_path / "val_curve.csv").read_text().splitlines()
    assert lines[0] == "step,seconds,val/loss,val/reward" and lines[2] == "10,4.0,1.5,0.62"


class Trainer:
    """What `StopWhenDecodesEnd` reads of a trainer."""

    def __init__(self, step: int, repeats: float | None):
        self.global_step, self.sanity_checking, self.should_stop = step, False, False
        self.callback_metrics = {} if repeats is None else {"val/repeated_trigrams": torch.tensor(repeats)}


@pytest.mark.parametrize("step, repeats, stops", [(50, 0.1, False), (75, 0.59, True), (75, 0.6, False),
                                                  (100, 0.2, True), (100, None, False)])
def test_a_stage_ends_once_its_greedy_decodes_stop_repeating_and_not_before_its_min_steps(step, repeats, stops):
    trainer = Trainer(step, repeats)
    StopWhenDecodesEnd(min_steps=75, repeats_below=0.6).on_validation_end(trainer, None)
    assert trainer.should_stop is stops
    inert = Trainer(step, repeats)
    StopWhenDecodesEnd(min_steps=None, repeats_below=None).on_validation_end(inert, None)
    assert inert.should_stop is False
    with pytest.raises(ValueError, match="repeats_below must be in"):
        StopWhenDecodesEnd(75, 0.0)


def test_an_mle_stage_trains_on_while_its_decodes_repeat(tmp_path):
    """In a run: above the share the stage runs to its steps; at 1 (any decodes end it) it ends at min_steps, and
    the steps before are the same."""
    from test_train import compose_run
    from trainer.run import run
    settings = ["reward=mle", "stages.mle.steps=30", "stages.mle.min_steps=20",
                "test=false", "threads=1"]
    run(compose_run(tmp_path, "on", [*settings, "stages.mle.repeats_below=0.000001"]))
    run(compose_run(tmp_path, "ends", [*settings, "stages.mle.repeats_below=1.0"]))
    on, ends = (list(csv.DictReader((tmp_path / name / "val_curve.csv").open())) for name in ("on", "ends"))
    assert [row["step"] for row in on] == ["10", "20", "30"] and [row["step"] for row in ends] == ["10", "20"]
    assert on[:2] == [{**row, "seconds": on[i]["seconds"]} for i, row in enumerate(ends)]
    # resumed (a continued sweep, a test killed), the ended stage trains no further
    last = tmp_path / "ends" / "checkpoints" / "last.ckpt"
    run(compose_run(tmp_path, "ends", [*settings, "stages.mle.repeats_below=1.0", f"ckpt_path={last}"]))
    assert [row["step"] for row in csv.DictReader((tmp_path / "ends" / "val_curve.csv").open())] == ["10", "20"]
    assert torch.load(last, map_location="cpu", weights_only=False)["global_step"] == 20



def test_an_integer_val_every_counts_steps_across_epochs(tmp_path):
    """TINY's epoch is 17 batches: validations at 12, 24, 36, where Lightning's default (each epoch's batch 12) gave
    12 and 29, and an interval past an epoch's end a traceback."""
    from test_train import compose_run
    from trainer.run import run
    run(compose_run(tmp_path, "steps", ["reward=mle", "trainer.val_check_interval=12", "stages.mle.steps=36",
                                        "test=false", "threads=1"]))
    assert [row["step"] for row in csv.DictReader((tmp_path / "steps" / "val_curve.csv").open())] == ["12", "24", "36"]
