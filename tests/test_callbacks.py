"""The validation curve's one-line summary, its checkpointed state and its files."""
from trainer.callbacks import ValidationCurve

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


def test_points_survive_a_checkpoint_and_are_written(tmp_path):
    curve = ValidationCurve("val/reward", "max", str(tmp_path))
    curve.points = list(POINTS)
    resumed = ValidationCurve("val/reward", "max", str(tmp_path))
    resumed.load_state_dict(curve.state_dict())
    assert resumed.points == POINTS
    resumed.write_csv(tmp_path / "val_curve.csv")
    lines = (tmp_path / "val_curve.csv").read_text().splitlines()
    assert lines[0] == "step,seconds,val/loss,val/reward" and lines[2] == "10,4.0,1.5,0.62"
