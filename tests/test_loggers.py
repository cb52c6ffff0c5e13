"""wandb without credentials: offline, never prompting, and the run lands on disk for `wandb sync`; one run per job of a
sweep."""
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest
from omegaconf import OmegaConf

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from trainer.loggers import WandbUnreachable, has_wandb_credentials, wandb_logger  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setattr("sys.stdin", None)  # a prompt would fail here instead of waiting
    return tmp_path


def test_credentials_from_env_or_netrc(no_credentials, monkeypatch):
    assert not has_wandb_credentials()
    (no_credentials / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password key\n")
    assert has_wandb_credentials()
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert has_wandb_credentials()


@pytest.mark.slow
def test_offline_run_without_credentials(no_credentials):
    logger = wandb_logger(save_dir=str(no_credentials), name="offline-test")
    logger.log_metrics({"train/loss": 1.0}, step=0)
    logger.experiment.finish()
    runs = list((no_credentials / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].glob("*.wandb"))


def test_credentials_without_a_reachable_server_are_one_line_before_any_work(no_credentials, monkeypatch):
    # with WANDB_API_KEY set and no network, the run stalled ~95 s, then ended in wandb's CommError traceback mid-run
    import wandb
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)

    def unreachable(*args, **kwargs):
        raise wandb.errors.CommError("Network error (ConnectionError), entering retry loop.")
    monkeypatch.setattr(wandb, "init", unreachable)
    with pytest.raises(WandbUnreachable, match=r"^logger=wandb: cannot start the wandb run \(CommError: Network error "
                                               r".*\): log offline with WANDB_MODE=offline"):
        wandb_logger(save_dir=str(no_credentials), name="online")


def test_a_resumed_run_keeps_its_wandb_id(no_credentials):
    first = wandb_logger(save_dir=str(no_credentials), name="a")
    again = wandb_logger(save_dir=str(no_credentials), name="a")
    other = wandb_logger(save_dir=str(no_credentials / "other"), name="b")
    assert first._id == again._id != other._id and len(first._id) == 12


# ---------------------------------------------------------------- a sweep: one wandb run per job

def wandb_records(run_folder: Path) -> list:
    """The records of an offline run's .wandb file: a LevelDB-style log of 32 KiB blocks after a 7-byte header, each
    chunk a 7-byte header (checksum, length, kind: 1 whole, 2 first, 3 middle, 4 last) and a protobuf's bytes."""
    from wandb.proto import wandb_internal_pb2

    data = next(run_folder.glob("*.wandb")).read_bytes()
    records, pending, position = [], b"", 7
    while position + 7 <= len(data):
        if 32768 - position % 32768 < 7:  # a block's tail too short for a header is padding
            position += 32768 - position % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        pending += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            records.append(wandb_internal_pb2.Record.FromString(pending))
            pending = b""
    return records


def of_kind(records: list, kind: str) -> list:
    return [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]


@pytest.mark.slow
def test_a_sweep_gives_each_job_its_own_finished_wandb_run(no_credentials):
    sweep = no_credentials / "sweep"
    result = subprocess.run(
        [sys.executable, "-m", "trainer.train", "-m", "experiment=demo_grid", "reward=mle,rouge_l", "logger=wandb",
         "threads=1", "data.train.n=200", "data.val_sample_size=8", "data.test_size=16", "stages.mle.steps=4",
         "stages.mixed.steps=4", "stages.mle.val_every=2", "stages.mixed.val_every=2", "rl.samples=2",
         f"cache_dir={no_credentials / 'cache'}", f"hydra.sweep.dir={sweep}"],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "already in progress" not in result.stdout + result.stderr
    assert "anonymous setting" not in result.stdout + result.stderr  # wandb's warning at every job's start
    ids = {}
    for reward, steps in (("mle", {2, 4}), ("rouge_l", {0, 2, 4})):
        job = sweep / "seed_0" / reward
        ids[reward] = (job / "wandb_id.txt").read_text().strip()
        (folder,) = (job / "wandb").glob("offline-run-*")  # one run, this job's, resumable by the id it keeps
        assert folder.name.endswith(ids[reward])
        records = wandb_records(folder)
        (run,) = of_kind(records, "run")
        assert (run.run_id, run.run_group, run.job_type) == (ids[reward], "sweep", reward)  # the sweep's name
        assert list(run.tags) == [f"reward={reward}", "seed=0"]
        config = {item.key: json.loads(item.value_json) for c in [run.config, *of_kind(records, "config")]
                  for item in c.update}
        written = OmegaConf.to_container(OmegaConf.load(job / "config.yaml"))
        assert {key: config[key] for key in written} == written  # the composed config, as the run folder keeps it
        assert [exit.exit_code for exit in of_kind(records, "exit")] == [0]  # finished when its job ended
        tables = {int(p.name.split("_")[1]): json.loads(p.read_text())
                  for p in (folder / "files" / "media" / "table" / "examples").glob("step_*.table.json")}
        assert set(tables) == steps  # its own validations' sample tables, no other job's
        assert all(("sample_reward" in t["columns"]) == (reward != "mle") for t in tables.values())
        assert [p.name.split("_")[:2] for p in (folder / "files" / "media" / "images").glob("*.png")] == [
            ["val", "curve"]]  # the run's validation curve, drawn
    assert ids["mle"] != ids["rouge_l"]


def test_a_report_is_logged_as_a_run_in_its_sweeps_group_with_its_tables_and_figures(no_credentials):
    from trainer.loggers import log_report, sweep_group
    assert sweep_group("/x/multirun/demo_grid/2026-12-02_13-45-54") == "demo_grid/2026-12-02_13-45-54"
    assert sweep_group("/work/runs/news55") == "news55"
    (no_credentials / "t.csv").write_text("model,rougeL\nMLE,52.3\nMixed w/ ROUGE-L,71.7\n")
    plt.figure().savefig(no_credentials / "f.png")
    folder = log_report(no_credentials, "news55", {"table4": no_credentials / "t.csv"},
                        {"table4_diff": no_credentials / "f.png", "missing": no_credentials / "none.png"})
    (run,) = of_kind(wandb_records(folder), "run")
    assert (run.run_group, run.job_type) == ("news55", "report")
    (table,) = (folder / "files" / "media" / "table").glob("table4_*.table.json")
    assert json.loads(table.read_text())["data"] == [["MLE", 52.3], ["Mixed w/ ROUGE-L", 71.7]]
    assert [p.name.split("_")[0] for p in (folder / "files" / "media" / "images").glob("*.png")] == ["table4"]
