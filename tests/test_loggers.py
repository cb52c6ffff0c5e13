"""wandb without credentials: offline, never prompting, and the run lands on disk for `wandb sync`."""
import pytest

from trainer.loggers import has_wandb_credentials, wandb_logger


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


def test_a_resumed_run_keeps_its_wandb_id(no_credentials):
    first = wandb_logger(save_dir=str(no_credentials), name="a")
    again = wandb_logger(save_dir=str(no_credentials), name="a")
    other = wandb_logger(save_dir=str(no_credentials / "other"), name="b")
    assert first._id == again._id != other._id and len(first._id) == 12
