"""scripts/fit_learned_metric.py: the ridge fit, the subset search, the geometric-mean target, input
errors, and the written reward config composing through Hydra."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

import scripts.fit_learned_metric as fit
from models.text.records import DataError, Row
from rewards.base import WeightedSum

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "fit_learned_metric.py"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def synthetic(n: int, names=("a", "b", "c"), seed: int = 0) -> list[dict]:
    """human = 2·first + 0.5·second + noise; the third is pure noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    human = 2 * x[:, 0] + 0.5 * x[:, 1] + 0.3 * rng.normal(size=n)
    return [{**dict(zip(names, map(float, row))), "human": float(h)} for row, h in zip(x, human)]


# ---------------------------------------------------------------- ridge

def test_ridge_hand_computed():
    # x centered: -1, 0, 1; xᵀx = 2, xᵀy = 2, so w = 2 / (2 + λ) = 2/3 and b = ȳ - x̄·w = 1 - 2/3.
    w, b = fit.ridge(np.array([[0.0], [1.0], [2.0]]), np.array([0.0, 1.0, 2.0]), lam=1.0)
    assert w == pytest.approx([2 / 3]) and b == pytest.approx(1 / 3)
    # Two centered, orthogonal features: xᵀx = 2I, xᵀy = (4, 2), so w = (4, 2) / 3 and b = 0.
    x = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    w, b = fit.ridge(x, np.array([2.0, -2.0, 1.0, -1.0]), lam=1.0)
    assert w == pytest.approx([4 / 3, 2 / 3]) and b == pytest.approx(0.0, abs=1e-12)


def test_ridge_without_penalty_is_least_squares_with_an_intercept():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(30, 3)) + 5, rng.normal(size=30)
    w, b = fit.ridge(x, y, lam=0.0)
    coef = np.linalg.lstsq(np.column_stack([np.ones(30), x]), y, rcond=None)[0]
    assert np.allclose(np.r_[b, w], coef)


# ---------------------------------------------------------------- the subset search

def test_finds_the_informative_features_and_their_weights(tmp_path, capsys):
    rows = synthetic(200)
    rows[3]["c"], rows[7]["human"] = None, None
    path = write_jsonl(tmp_path / "scored.jsonl", rows)
    fits = fit.main([str(path), "--features", "a", "b", "c", "--target", "human", "--splits", "50"])
    assert len(fits) == 7
    assert {"a", "b"} <= set(fits[0].features) and fits[0].mean > 0.9
    assert fits[-1].features == ("c",)
    ab = next(f for f in fits if f.features == ("a", "b"))
    assert ab.weights["a"] == pytest.approx(2, abs=0.1) and ab.weights["b"] == pytest.approx(0.5, abs=0.1)
    printed = capsys.readouterr().out
    assert "198 rows (2 dropped for a null)" in printed
    assert "_target_: rewards.base.WeightedSum" in printed


def test_min_subset_size_and_geometric_mean_target(tmp_path):
    rows = [{**r, "readability": float(np.exp(r["human"])), "relevance": float(np.exp(r["human"] + 1))}
            for r in synthetic(60)]
    path = write_jsonl(tmp_path / "scored.jsonl", rows)
    fits = fit.main([str(path), "--features", "a", "b", "c", "--target", "readability", "relevance",
                     "--splits", "20", "--min-subset-size", "2"])
    assert len(fits) == 4 and all(len(f.features) >= 2 for f in fits)
    # The log of the geometric mean is human + 1/2, a linear target again.
    assert {"a", "b"} <= set(fits[0].features)


def test_geometric_mean_of_two_targets():
    row = Row("h.jsonl", 4, {"readability": 4, "relevance": 9, "bad": 0})
    assert fit.geometric_mean(row, ["readability", "relevance"]) == pytest.approx(6.0)
    assert fit.geometric_mean(row, ["bad"]) == 0.0  # one target: used as is
    with pytest.raises(DataError, match=r"h\.jsonl:4: field 'bad' must be positive for the geometric mean"):
        fit.geometric_mean(row, ["readability", "bad"])


# ---------------------------------------------------------------- the written config

def test_written_config_composes_and_instantiates_as_a_weighted_sum(tmp_path):
    conf = shutil.copytree(ROOT / "conf", tmp_path / "conf")
    path = write_jsonl(tmp_path / "scored.jsonl", synthetic(40, names=("rouge_l", "sms", "noise")))
    out = conf / "reward" / "learned.yaml"
    fits = fit.main([str(path), "--features", "rouge_l", "sms", "--target", "human", "--splits", "10",
                     "--min-subset-size", "2", "-o", str(out), "--name", "learned"])
    assert "a constant reward does not change the RL advantage" in out.read_text()
    with initialize_config_dir(version_base="1.3", config_dir=str(conf)):
        cfg = compose("train", overrides=["reward=learned", "output_dir=/tmp/sumrl-test", "run_name=test"])
    assert cfg.reward.terms.rouge_l._target_ == "rewards.rouge.RougeL"
    assert cfg.reward.terms.sms._target_ == "rewards.mover.SentenceMoverSimilarity"
    reward = instantiate(cfg.reward)
    assert isinstance(reward, WeightedSum) and reward.name == "learned"
    assert reward.weights == fits[0].weights and set(reward.terms) == {"rouge_l", "sms"}


# ---------------------------------------------------------------- input errors

def test_bad_value_and_missing_field_name_file_line_and_field(tmp_path):
    rows = synthetic(10)
    rows[4]["b"] = "high"
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataError, match=r"bad\.jsonl:5: field 'b' must be a finite number"):
        fit.main([str(path), "--features", "a", "b", "--target", "human"])
    with pytest.raises(DataError, match=r"bad\.jsonl:1: no field 'qa_conf'"):
        fit.main([str(path), "--features", "a", "qa_conf", "--target", "human"])


def test_command_line_reports_bad_input_in_one_line(tmp_path):
    rows = synthetic(10)
    rows[2]["human"] = float("nan")  # json.dumps writes NaN, which json.loads reads back
    path = write_jsonl(tmp_path / "nan.jsonl", rows)
    result = subprocess.run([sys.executable, str(SCRIPT), str(path), "--features", "a", "--target", "human"],
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(SCRIPT.parents[1])})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {path}:3: field 'human' must be a finite number or null, got NaN"]
