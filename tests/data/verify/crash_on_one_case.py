"""Implementations that kill their process on exactly one case (any case with a size of 63), and one that
is right everywhere. opgate must fail each crashing one (failure class `crash`) naming that case, and judge
every other case in a fresh process.

Set OPGATE_TEST_DIE_IN_SETUP=1 to make the spec kill the check process while it is being loaded there
(opgate's own set-up, before any case): that stays an internal error.
"""

import ctypes
import os
import sys

import opgate

if os.environ.get("OPGATE_TEST_DIE_IN_SETUP") and sys.argv[0].endswith("worker.py"):
    os._exit(9)

CRASH_SIZE = 63  # an edge size opgate adds (2^k - 1 below the declared 64): one case of the quick plan

double = opgate.Operator(
    "double",
    reference=lambda x: x * 2,
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [4, 8], "N": [64]},
    dtypes=["float32"],
)


def _crashes_here(x) -> bool:
    return CRASH_SIZE in tuple(x.shape)


@double.implementation("torch")
def double_torch(x):
    return x + x


@double.implementation("segfaults", backend="torch")
def double_segfaults(x):
    if _crashes_here(x):
        ctypes.string_at(0)  # reads address 0: SIGSEGV, as a native extension writing out of bounds dies
    return x * 2


@double.implementation("aborts", backend="torch")
def double_aborts(x):
    if _crashes_here(x):
        os.abort()  # SIGABRT, as glibc's "double free or corruption" ends a process
    return x * 2


@double.implementation("exits", backend="torch")
def double_exits(x):
    if _crashes_here(x):
        os._exit(7)
    return x * 2


@double.implementation("hangs", backend="torch")
def double_hangs(x):
    if _crashes_here(x):
        while True:  # never returns, never sleeps: only a limit outside Python's loop can end it
            pass
    return x * 2


@double.implementation("aborts_always", backend="torch")
def double_aborts_always(x):
    os.abort()  # on every case: opgate gives up after MAX_CRASHES crashes and counts the rest as not run


@double.implementation("crashes_while_shrinking", backend="torch")
def double_crashes_while_shrinking(x):
    if x.shape[0] == 5:  # M=5 is no case of the quick plan, but a size shrinking tries on the way down from 8
        os.abort()
    return x * 3 if x.shape[0] == 8 else x * 2  # wrong whenever M=8
