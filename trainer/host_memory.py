"""Host memory that glibc's allocator keeps for reuse, so that a CPU step does not page-fault its buffers in afresh."""
from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
KEEP_BELOW = 2**30  # bytes: blocks smaller than this come from (and go back to) the heap


def keep_freed_memory() -> bool:
    """Have glibc's malloc serve blocks under 1 GiB from its heap and keep the heap when they are freed.

    By default it maps each block over 32 MiB afresh and unmaps it on free, and trims the heap's free top: a training
    step allocates and frees the same large activations and gradients every step ([rows, 400, 512] attention buffers,
    [tokens, 50k] logits), and each fresh 4 KiB page costs a fault that the kernel zero-fills, most of a CPU step's
    system time (README, "Speed"). The arithmetic and its results do not change: PyTorch aligns its blocks itself.
    The process keeps its peak memory instead of returning it. Returns whether the allocator took both settings
    (False off glibc, e.g. macOS or musl, where nothing changes)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process already runs on
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, KEEP_BELOW)) & bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
