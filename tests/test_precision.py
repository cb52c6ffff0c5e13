"""trainer.precision=${fast_precision:}: bf16 autocast where the device computes bf16 natively, fp32 elsewhere."""
import pytest
import torch

from trainer import precision


@pytest.mark.parametrize("avx512_bf16, amx, expected", [(True, False, "bf16-mixed"), (False, True, "bf16-mixed"),
                                                        (False, False, "32-true")])
def test_a_cpu_run_takes_bf16_only_where_the_cpu_computes_it(monkeypatch, caplog, avx512_bf16, amx, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    precision.fast_precision.cache_clear()
    with caplog.at_level("INFO", logger="trainer.precision"):
        assert precision.fast_precision() == expected
        assert precision.fast_precision() == expected
    precision.fast_precision.cache_clear()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith(f"precision {expected}")  # once a process, with what was found
    assert ("neither" in said[0]) == (expected == "32-true")


def test_a_command_line_asks_for_it_and_lightning_takes_the_answer_while_the_news_grid_stays_fp32():
    from hydra import compose, initialize_config_module
    import pytorch_lightning as pl
    from omegaconf import OmegaConf
    with initialize_config_module("conf", version_base="1.3"):
        grid = compose("train", overrides=["experiment=cnndm_sample_grid", "reward=mle"])
        asked = compose("train", overrides=["experiment=cnndm_sample_grid", "reward=mle",
                                            "trainer.precision=${fast_precision:}"])
    # bf16 left seed 0's WMS run at its start, where fp32's gained (docs/RESULTS.md): its table stays fp32's
    assert grid.trainer.precision == "32-true"
    assert OmegaConf.to_container(asked.trainer)["precision"] == "${fast_precision:}"
    assert pl.Trainer(precision=asked.trainer.precision, accelerator="cpu", logger=False).precision in ("bf16-mixed",
                                                                                                       "32-true")


def test_the_command_line_registers_the_resolver_before_a_sweep_launches():
    """Hydra's launcher gives each job the resolvers of the launching process: registered only inside a job, the
    second job a worker ran failed (`Unsupported interpolation type fast_precision`)."""
    import subprocess
    import sys
    check = "import trainer.train; from omegaconf import OmegaConf; assert OmegaConf.has_resolver('fast_precision')"
    assert subprocess.run([sys.executable, "-c", check]).returncode == 0
