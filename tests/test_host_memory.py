"""keep_freed_memory: large blocks come from glibc's heap, and freeing them leaves the heap as it was."""
import ctypes

import pytest

from trainer.host_memory import keep_freed_memory


class MallInfo2(ctypes.Structure):  # glibc >= 2.33, <malloc.h>
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def test_a_large_block_comes_from_the_heap_and_is_kept_when_freed():
    libc = ctypes.CDLL(None)
    if not keep_freed_memory() or not hasattr(libc, "mallinfo2"):
        pytest.skip("not glibc >= 2.33")
    libc.mallinfo2.restype = MallInfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    before = libc.mallinfo2()
    block = libc.malloc(2**26)  # 64 MiB, over glibc's default ceiling (32 MiB): mapped afresh by default
    held = libc.mallinfo2()
    libc.free(block)  # the heap's last block (nothing was allocated after it): trimmed by default
    freed = libc.mallinfo2()
    assert held.hblkhd == before.hblkhd  # no new mapping: the heap served it
    assert held.uordblks >= before.uordblks + 2**26
    assert freed.arena == held.arena  # the heap was not trimmed: the next step reuses its pages
