"""`trainer.precision=${fast_precision:}`: bf16 autocast where the hardware computes bf16
natively, fp32 elsewhere, said once in the run's log. Rewards score in fp32 either way (`rewards.base.outside_autocast`);
the model's probabilities and losses are fp32 too (`models.pointer_generator`). Measured: scripts/bench_precision.py."""
from __future__ import annotations

import functools
import logging

from omegaconf import OmegaConf

log = logging.getLogger(__name__)


def native_bf16() -> tuple[bool, str]:
    """Whether the device a run would use (CUDA if there is one, as `accelerator: auto` picks) computes bf16 natively,
    and what was found."""
    import torch  # here, not at import: the command line answers --help before torch loads
    if torch.cuda.is_available():
        supported = torch.cuda.is_bf16_supported()
        return supported, f"{torch.cuda.get_device_name()} {'supports' if supported else 'lacks'} bf16"
    found = [name for name, has in (("AVX512_BF16", torch.cpu._is_avx512_bf16_supported()),
                                    ("AMX", torch.cpu._is_amx_tile_supported())) if has]
    return bool(found), f"the CPU has {' and '.join(found)}" if found else "the CPU has neither AVX512_BF16 nor AMX"


@functools.cache  # once a process: the log says it once
def fast_precision() -> str:
    """Lightning's `precision`: 'bf16-mixed' where `native_bf16`, else '32-true' (emulated bf16 is slower than fp32)."""
    supported, found = native_bf16()
    precision = "bf16-mixed" if supported else "32-true"
    log.info("precision %s (trainer.precision=${fast_precision:}: %s)", precision, found)
    return precision


OmegaConf.register_new_resolver("fast_precision", fast_precision, replace=True)
