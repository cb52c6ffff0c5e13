"""The Hydra entry point end to end on a tiny demo run: MLE trains (the loss falls), checkpoints, tests
and writes its results; a mixed run starts from the MLE checkpoint; `table4.py`
collects both runs into one table. Resuming and the checks of starting points are in test_resume.py."""
import csv
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rouge_score import rouge_scorer
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from test_scripts import load_script
from trainer.checkpoints import CheckpointError
from trainer.module import SummarizationModule
from trainer.run import run

ROOT = Path(__file__).resolve().parents[1]
TINY = ["data=demo", "data.train.n=300", "data.val_sample_size=16", "data.test_size=12", "data.eval_batch_size=16",
        "model=demo", "model.config.emb_dim=16", "model.config.hidden_dim=24", "trainer.log_every_n_steps=1",
        "trainer.max_epochs=-1", "trainer.val_check_interval=10",
        "stages.mle.lr=3e-3", "module.beam.beam_size=2", "threads=null"]


def compose_run(tmp_path: Path, name: str, overrides: list[str]):
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        return compose("train", overrides=[f"output_dir={tmp_path / name}", f"run_name={name}",
                                           f"cache_dir={tmp_path / 'cache'}", *TINY, *overrides])


def logged(run_dir: Path, key: str) -> list[float]:
    rows = csv.DictReader((run_dir / "logs" / "version_0" / "metrics.csv").open())
    return [float(r[key]) for r in rows if r.get(key)]


def global_step(checkpoint: Path) -> int:
    return torch.load(checkpoint, map_location="cpu", weights_only=False)["global_step"]


def freeze_weights(monkeypatch) -> None:
    """Training whose steps never move the weights (SGD at lr 0), where a setting of lr 0 is refused as training
    nothing."""
    monkeypatch.setattr(SummarizationModule, "configure_optimizers",
                        lambda self: torch.optim.SGD(self.model.parameters(), lr=0.0))


@pytest.fixture(scope="module")
def mle_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    results = run(compose_run(tmp, "mle", ["reward=mle", "trainer.max_steps=40"]))
    return tmp, results


@pytest.mark.slow
def test_mle_run_trains_checkpoints_and_reports(mle_run):
    tmp, results = mle_run
    run_dir = tmp / "mle"
    losses = logged(run_dir, "train/loss")
    assert len(losses) == 40 and sum(losses[-5:]) < 0.8 * sum(losses[:5])
    assert (run_dir / "checkpoints" / "best.ckpt").exists() and global_step(run_dir / "checkpoints" / "last.ckpt") == 40
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert results["n"] == 12 and set(results) >= {"rouge1", "rouge2", "rougeL", "rougeLsum", "wms", "sms", "s_wms"}
    assert json.loads((run_dir / "results.json").read_text()) == results
    summaries = [json.loads(line) for line in (run_dir / "summaries.jsonl").open()]
    assert len(summaries) == 12 and all(set(s) == {"id", "summary", "reference", "scores", "tokens",
                                                   "repeated_trigrams", "greedy", "lead3"} for s in summaries)


def repeated_share(tokens: list[str]) -> float:
    """Trigrams seen earlier in the summary over its trigrams, counted one by one."""
    trigrams = [tuple(tokens[i:i + 3]) for i in range(len(tokens) - 2)]
    return sum(t in trigrams[:i] for i, t in enumerate(trigrams)) / max(len(trigrams), 1)


@pytest.mark.slow
def test_the_test_writes_greedy_decodes_beside_the_beam_and_the_lead3(mle_run):
    """Each article's greedy decode (no trigram blocking) is scored beside the beam's, with both decodes' lengths and
    repeats; the lead-3 is the article's first three sentences."""
    tmp, results = mle_run
    rows = [json.loads(line) for line in (tmp / "mle" / "summaries.jsonl").open()]
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    data = instantiate(compose_run(tmp, "mle", ["reward=mle"]).data)
    data.setup()
    articles = {ex.id: ex.source for ex in data.splits["test"]}
    for row in rows:
        for decoded in (row, row["greedy"]):
            tokens = decoded["summary"].split()
            assert decoded["tokens"] == len(tokens)
            assert decoded["repeated_trigrams"] == pytest.approx(repeated_share(tokens))
            assert decoded["scores"]["rougeL"] == pytest.approx(
                100 * scorer.score(row["reference"], decoded["summary"])["rougeL"].fmeasure)
        lead = row["lead3"].split("\n")
        assert len(lead) == 3 and " ".join(lead).split() == articles[row["id"]][:len(" ".join(lead).split())]
        assert all(sentence.split()[-1] in (".", "!", "?") for sentence in lead)
    assert any(row["greedy"]["summary"] != row["summary"] for row in rows)
    for key in ("rougeL", "sms", "tokens", "repeated_trigrams"):
        assert results["greedy"][key] == pytest.approx(sum(r["greedy"].get(key, r["greedy"]["scores"].get(key))
                                                           for r in rows) / len(rows))


@pytest.mark.slow
def test_mixed_run_starts_from_mle_and_table4_collects_both(mle_run, capsys, caplog):
    tmp, mle_results = mle_run
    best = tmp / "mle" / "checkpoints" / "best.ckpt"
    caplog.set_level(logging.INFO)
    results = run(compose_run(tmp, "rouge_l", ["reward=rouge_l", f"mle_checkpoint={best}", "trainer.max_steps=4",
                                                "trainer.val_check_interval=4"]))
    assert results["n"] == 12
    assert not [r for r in caplog.records if "weights_only" in r.getMessage()]  # no line per checkpoint written
    assert len(logged(tmp / "rouge_l", "train/reward_sample")) == 4
    assert logged(tmp / "rouge_l", "train/gamma")[0] == pytest.approx(0.97)
    assert logged(tmp / "rouge_l", "val/reward")
    # evidence: validated before the first mixed step and after it, the curve drawn, the line printed
    curve = list(csv.DictReader((tmp / "rouge_l" / "val_curve.csv").open()))
    assert [int(p["step"]) for p in curve] == [0, 4] and float(curve[0]["seconds"]) == 0.0
    assert {"val/reward", "val/rouge_l", "val/length", "val/repeated_trigrams"} <= set(curve[0])
    summary = (tmp / "rouge_l" / "val_summary.txt").read_text()
    assert summary.startswith(f"val/reward {float(curve[0]['val/reward']):.4f} at step 0 → best ")
    assert (tmp / "rouge_l" / "val_curve.png").stat().st_size > 10_000

    table4 = load_script("table4")
    capsys.readouterr()
    table4.main([str(tmp / "mle"), str(tmp / "rouge_l"), "--out", str(tmp)])
    printed = capsys.readouterr().out
    assert "| MLE+Pgen (no reward) | " in printed and "| Mixed w/ ROUGE-L | " in printed
    table = json.loads((tmp / "table4.json").read_text())
    assert table["MLE+Pgen (no reward)"]["rougeL"] == pytest.approx(mle_results["rougeL"], abs=1e-4)


@pytest.mark.slow
def test_leave_one_out_with_k_samples_trains(mle_run):
    tmp, _ = mle_run
    best = tmp / "mle" / "checkpoints" / "best.ckpt"
    run(compose_run(tmp, "rloo", ["reward=rouge_l", f"mle_checkpoint={best}", "trainer.max_steps=2", "test=false",
                                  "rl.samples=3", "rl/baseline=leave_one_out", "trainer.val_check_interval=2"]))
    assert len(logged(tmp / "rloo", "train/reward_sample")) == 2
    assert not logged(tmp / "rloo", "train/reward_greedy")  # RLOO decodes no greedy rows


def test_a_profiled_run_writes_where_each_stages_time_went(mle_run, caplog):
    """profiler=simple: Lightning's table of each hook's seconds, a file per stage in the run's folder (the console
    is kept quiet, so a profile only logged would be lost)."""
    tmp, _ = mle_run
    best = tmp / "mle" / "checkpoints" / "best.ckpt"
    caplog.set_level(logging.INFO)
    run(compose_run(tmp, "profiled", ["reward=rouge_l", f"mle_checkpoint={best}", "trainer.max_steps=2",
                                      "trainer.val_check_interval=2", "profiler=simple"]))
    tables = {stage: (tmp / "profiled" / f"{stage}-profile.txt").read_text() for stage in ("validate", "fit", "test")}
    assert all(f"{stage.upper()} Profiler Report" in table for stage, table in tables.items())
    for hook in ("training_step", "backward", "validation_step", "optimizer_step"):
        assert f"SingleDeviceStrategy.{hook}" in tables["fit"] or f"SummarizationModule.{hook}" in tables["fit"]
    assert "SingleDeviceStrategy.test_step" in tables["test"]
    assert str(tmp / "profiled" / "fit-profile.txt") in caplog.text  # the console says where they are


def test_leave_one_out_needs_two_samples(tmp_path):
    with pytest.raises(Exception, match="rl.samples >= 2"):  # raised while building, before any training
        run(compose_run(tmp_path, "rloo", ["reward=rouge_l", "rl/baseline=leave_one_out", "init_from=none"]))


def test_missing_init_checkpoint_is_named(tmp_path):
    with pytest.raises(CheckpointError, match="nowhere.ckpt not found"):
        run(compose_run(tmp_path, "sms", ["reward=sms", f"mle_checkpoint={tmp_path / 'nowhere.ckpt'}"]))


@pytest.mark.slow
def test_ddp_on_two_cpu_processes_trains_and_tests_the_whole_test_set(tmp_path):
    # As users launch it (Lightning re-runs the command for rank 1); every trainable parameter must get
    # a gradient, and rank 0 alone tests all 12 test examples instead of each rank half of them.
    overrides = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.max_steps=4",
                 "reward=mle", f"output_dir={tmp_path / 'ddp'}", f"hydra.run.dir={tmp_path / 'hydra'}",
                 f"cache_dir={tmp_path / 'cache'}", *TINY, "trainer.val_check_interval=2"]
    probe = tmp_path / "probe"
    overrides += ["+callbacks.digest._target_=ddp_probe.ParameterDigest", f"+callbacks.digest.path={probe}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "trainer.train", *overrides], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((probe / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["params"] == ranks[1]["params"]  # identical parameters on both ranks after training
    assert len(ranks[0]["ids"]) == len(ranks[1]["ids"]) == 4 * 16  # 4 steps of batch 16 on each rank
    assert not set(ranks[0]["ids"]) & set(ranks[1]["ids"])  # each rank its own share of the training data
    assert json.loads((tmp_path / "ddp" / "results.json").read_text())["n"] == 12
    assert len((tmp_path / "ddp" / "summaries.jsonl").read_text().splitlines()) == 12


@pytest.mark.slow
def test_mixed_run_with_the_learned_qa_metric(mle_run, tiny_qa_model):
    """The learned metric trains: each term and the QA questions are logged, QAconf is a test metric, and the
    frozen QA network stays out of the checkpoints (they hold the summarizer's weights only)."""
    tmp, _ = mle_run
    best = tmp / "mle" / "checkpoints" / "best.ckpt"
    model = [f"reward.terms.{term}.qa.model={tiny_qa_model}" for term in ("qa_conf", "qa_fscore")]
    results = run(compose_run(tmp, "qa", ["reward=qa_learned", f"mle_checkpoint={best}", "trainer.max_steps=2",
                                          "trainer.val_check_interval=2", *model, "+reward@metrics.qa_conf=qa_conf",
                                          f"metrics.qa_conf.qa.model={tiny_qa_model}"]))
    assert 0 <= results["qa_conf"] <= 100
    for key in ("rouge_l", "qa_conf", "qa_fscore", "qa_questions", "qa_no_questions", "qa_pairs_read"):
        assert len(logged(tmp / "qa", f"train/reward/{key}")) == 2
    saved = torch.load(tmp / "qa" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    start = torch.load(best, map_location="cpu", weights_only=False)
    assert set(saved["state_dict"]) == set(start["state_dict"])
    assert all(key.startswith("model.") for key in saved["state_dict"])


@pytest.mark.slow
def test_best_checkpoint_is_the_start_when_training_never_beats_it(mle_run, monkeypatch):
    """With weights that never move no validation beats the start (ModelCheckpoint keeps a tie): best.ckpt must then
    hold the starting weights (step 0), as the curve says, not the first trained step."""
    tmp, _ = mle_run
    best = tmp / "mle" / "checkpoints" / "best.ckpt"
    freeze_weights(monkeypatch)
    run(compose_run(tmp, "flat", ["reward=rouge_l", f"mle_checkpoint={best}", "test=false",
                                  "trainer.max_steps=4", "trainer.val_check_interval=2"]))
    assert global_step(tmp / "flat" / "checkpoints" / "best.ckpt") == 0
    assert global_step(tmp / "flat" / "checkpoints" / "last.ckpt") == 4
    assert "at step 0 (Δ +0.0000" in (tmp / "flat" / "val_summary.txt").read_text()


def console_noise(console: str, jobs: int) -> list[str]:
    """What a sweep's console should not hold: absl's lines, Python warnings (`file.py:N: message`), Lightning's table
    of test metrics (the results table prints them), the joblib launcher's call, a stage's result line twice or
    without its run's name (runs side by side interleave their lines)."""
    lines = console.splitlines()
    noise = [line for line in lines if "absl" in line or re.search(r"\.py:\d+: ", line) or "test/rouge" in line
             or "Joblib.Parallel(" in line]
    results = [line for line in lines if "→ best" in line]
    unnamed = [line for line in results if not re.search(r" - seed_\d+/\w+: ", line)]
    return noise + unnamed + ([] if len(results) == jobs else results)


@pytest.mark.slow
def test_a_seed_sweep_runs_one_grid_per_seed_and_table4_pools_them(tmp_path, capsys):
    """`-m experiment=demo_grid reward=mle,rouge_l seed=0,1`: each seed's mixed run starts from that seed's MLE run
    (its lineage names it), and table4 reads the sweep as one row per reward over two seeds."""
    sweep = tmp_path / "sweep"
    overrides = ["-m", "experiment=demo_grid", "reward=mle,rouge_l", "seed=0,1", f"hydra.sweep.dir={sweep}",
                 f"cache_dir={tmp_path / 'cache'}", "threads=1",
                 *[o for o in TINY if not o.startswith(("threads", "trainer.val_check"))],
                 "stages.mle.steps=6", "stages.mle.val_every=3", "stages.mixed.steps=2", "stages.mixed.val_every=1",
                 "data.val_sample_size=8", "module.examples_to_log=0"]
    done = subprocess.run([sys.executable, "-m", "trainer.train", *overrides], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert console_noise(done.stdout + done.stderr, jobs=4) == []
    configs = {(s, r): OmegaConf.load(sweep / f"seed_{s}" / r / "config.yaml")
               for s in (0, 1) for r in ("mle", "rouge_l")}
    for seed in (0, 1):
        assert configs[seed, "rouge_l"].lineage == [configs[seed, "mle"].run_id]
        assert configs[seed, "rouge_l"].init_from.endswith(f"seed_{seed}/mle/checkpoints/best.ckpt")
    assert configs[0, "mle"].run_id != configs[1, "mle"].run_id
    load_script("table4").main([str(sweep), "--metrics", "--out", str(tmp_path)])
    report = capsys.readouterr().out
    assert "2 seeds pooled" in report and " of 2 seeds significant: seed 0 " in report


def test_a_plain_sweep_continued_with_resume_if_exists_finds_its_own_folders(tmp_path):
    """The GUIDE's way to continue a sweep, on one without an experiment's `seed_<n>/<run_name>` folders: the points'
    folders are named by their overrides, and `resume_if_exists=true` must not name new ones (it trained every point
    again, beside the first)."""
    sweep = tmp_path / "sweep"
    command = [sys.executable, "-m", "trainer.train", "-m", "reward=mle", f"hydra.sweep.dir={sweep}", "data=demo",
               "data.train.n=200", "data.test_size=8", "data.val_sample_size=8", "model=demo", "stages.mle.steps=4",
               "stages.mle.val_every=2", "threads=1"]  # a few overrides: they name the folder
    for extra in ([], ["resume_if_exists=true"]):
        done = subprocess.run([*command, *extra], cwd=ROOT, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "SUMRL_CACHE": str(tmp_path / "cache")})
        assert done.returncode == 0, done.stderr[-3000:]
    assert len([p for p in sweep.iterdir() if p.is_dir()]) == 1
    assert "ended and was tested with these settings: its results kept" in done.stdout + done.stderr


def test_a_sweep_stops_at_its_first_failed_point(tmp_path):
    """A failed MLE point must not let the reward points start from whatever it left (Hydra's basic sweeper would run
    them all, then raise): `hydra.sweeper.max_batch_size=1` launches one point at a time and stops at a failure."""
    sweep = tmp_path / "sweep"
    done = subprocess.run([sys.executable, "-m", "trainer.train", "-m", "experiment=demo_grid", "reward=mle,rouge_l",
                           "stages.mle.steps=0", f"hydra.sweep.dir={sweep}", f"cache_dir={tmp_path / 'cache'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "trainer.max_steps=0 trains nothing" in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.strip().splitlines()[-1].startswith("SettingsError: ")
    assert not (sweep / "seed_0" / "rouge_l").exists()


def test_the_progress_bar_counts_the_stages_steps_across_epochs_and_a_resume(tmp_path, capfd):
    # Lightning's bar counted each epoch's batches: "20/?" after a resume, never the stage's steps
    steps = ["reward=mle", "data.train.n=100", "trainer.val_check_interval=6", "test=false"]  # 6 batches an epoch
    run(compose_run(tmp_path, "run", [*steps, "trainer.max_steps=9"]))
    shown = capfd.readouterr().out.replace("\r", "\n")  # Lightning's bars write to stdout
    assert re.search(r"^step: 100%\|.*\| 9/9 ", shown, re.M) and not re.search(r"^Epoch", shown, re.M)
    run(compose_run(tmp_path, "run", [*steps, "trainer.max_steps=12",
                                      f"ckpt_path={tmp_path / 'run' / 'checkpoints' / 'last.ckpt'}"]))
    shown = capfd.readouterr().out.replace("\r", "\n")
    assert re.search(r"^step:  75%\|.*\| 9/12 ", shown, re.M) and re.search(r"^step: 100%\|.*\| 12/12 ", shown, re.M)
