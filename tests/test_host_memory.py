"""The training entry point keeps freed host memory in the process (cli.keep_freed_host_memory)."""

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")

# In a fresh interpreter: is an 8 MiB block served by its own mmap (glibc's default above 128 KiB) before and
# after the call? mallinfo2().hblks counts the blocks that are mmapped.
PROBE = """
import ctypes
from grpo_train.cli import keep_freed_host_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]

def mmapped_blocks_for(size):
    before = libc.mallinfo2().hblks
    block = libc.malloc(size)
    after = libc.mallinfo2().hblks
    libc.free(block)
    return after - before

print(mmapped_blocks_for(8 << 20), keep_freed_host_memory(), mmapped_blocks_for(8 << 20))
"""


def run_probe(**env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True,
                         check=True)
    return out.stdout.split()


def test_blocks_up_to_32_mib_come_from_the_heap_after_the_call():
    assert run_probe() == ["1", "True", "0"]


def test_a_users_malloc_tuning_is_left_alone():
    assert run_probe(MALLOC_TOP_PAD_="0") == ["1", "False", "1"]
