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
import sys
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

size, never_mmap = int(sys.argv[1]) << 20, sys.argv[2] == "never_mmap"
print(mmapped_blocks_for(size), keep_freed_host_memory(never_mmap), mmapped_blocks_for(size))
"""


def fresh_interpreter(source: str, *args: str, **env: str) -> list[str]:
    """The words `source` prints, run in a fresh interpreter without the caller's MALLOC_* variables."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", source, *args], env={**clean, **env}, capture_output=True,
                         text=True, check=True)
    return out.stdout.split()


def run_probe(mib: int = 8, mode: str = "default", **env: str) -> list[str]:
    """(mmapped blocks for a block of `mib` MiB before the call, what the call returned, the same after it)."""
    return fresh_interpreter(PROBE, str(mib), mode, **env)


def test_blocks_up_to_32_mib_come_from_the_heap_after_the_call():
    assert run_probe() == ["1", "True", "0"]
    assert run_probe(64) == ["1", "True", "1"]  # larger ones still have their own mmap


def test_never_mmap_serves_every_block_from_the_heap():
    """make bench's plain step: its [rows, columns, vocabulary] logits are hundreds of MiB."""
    assert run_probe(64, "never_mmap") == ["1", "True", "0"]


def test_a_users_malloc_tuning_is_left_alone():
    assert run_probe(MALLOC_TOP_PAD_="0") == ["1", "False", "1"]


# In a fresh interpreter, every block from the heap: the heap's size (mallinfo2().arena) while a block larger than
# glibc's top pad (1 GiB here) is held, and after it is freed. Untouched, it costs address space, not memory.
TRIM_PROBE = PROBE.split("size, never_mmap")[0] + """
print(keep_freed_host_memory(True))
block = libc.malloc(3 << 29)
held = libc.mallinfo2().arena
libc.free(block)
print(held >= 3 << 29, held - libc.mallinfo2().arena)
"""


def test_a_freed_block_larger_than_the_top_pad_stays_in_the_heap():
    """No trimming at all: mallopt takes a C int, and a 16 GiB trim threshold once reached glibc as 0, so every
    free trimmed the heap down to its 1 GiB top pad and the plain step's fp32 logits (~1 GiB a tensor) page-faulted
    ~420 thousand pages a step in again."""
    assert fresh_interpreter(TRIM_PROBE) == ["True", "True", "0"]
