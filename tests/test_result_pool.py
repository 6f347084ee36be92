"""The fused kernels' result pool: an array is handed out again only once nobody refers to it."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest
from lamina.backends.numpy import result_pool as rp

BIG = (rp.MIN_BYTES // 4,)          # f32 elements of one pooled array


@pytest.fixture(autouse=True)
def empty_pool() -> Iterator[None]:
    rp.release()
    yield
    rp.release()


def test_a_dropped_array_is_handed_out_again() -> None:
    a = rp.empty(BIG, np.float32)
    addr = a.ctypes.data
    del a
    b = rp.empty(BIG, np.float32)
    assert b.ctypes.data == addr and rp.held_bytes() == b.nbytes


def _holder(a: np.ndarray, hold: str) -> object:
    if hold == "array":
        return a
    if hold == "view":
        return a[1:]
    if hold == "reshape":
        return a.reshape(2, -1)
    if hold == "memoryview":
        return memoryview(a)  # pyright: ignore[reportArgumentType]
    return np.frombuffer(memoryview(a), np.float32)  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize("hold", ["array", "view", "reshape", "memoryview", "frombuffer"])
def test_an_array_anything_refers_to_is_not_reused(hold: str) -> None:
    a = rp.empty(BIG, np.float32)
    a[...] = 7
    keep = _holder(a, hold)
    del a
    b = rp.empty(BIG, np.float32)
    b[...] = 0
    assert np.all(np.asarray(keep) == 7)
    assert not np.shares_memory(np.asarray(keep), b)


def test_other_shapes_dtypes_and_small_arrays_are_not_mixed_up() -> None:
    a = rp.empty(BIG, np.float32)
    addr = a.ctypes.data
    del a
    assert rp.empty(BIG, np.int32).ctypes.data != addr
    assert rp.empty((BIG[0] * 2,), np.float32).ctypes.data != addr
    small = rp.empty((16,), np.float32)
    assert small.nbytes < rp.MIN_BYTES and rp.held_bytes() == 2 * rp.MIN_BYTES + 2 * rp.MIN_BYTES


def test_the_pool_holds_at_most_max_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_BYTES, unused arrays are dropped (oldest first) to make room; arrays in use are
    never dropped, and a new one that does not fit is simply not pooled."""
    monkeypatch.setattr(rp, "MAX_BYTES", 2 * rp.MIN_BYTES)
    a, b = rp.empty(BIG, np.float32), rp.empty(BIG, np.float32)
    c = rp.empty(BIG, np.float32)         # a and b in use, no room: c is not pooled
    assert rp.held_bytes() == 2 * rp.MIN_BYTES
    del c
    del a
    d = rp.empty(BIG, np.int32)           # another kind: a (unused) is dropped to make room
    assert rp.held_bytes() == 2 * rp.MIN_BYTES
    e = rp.empty(BIG, np.float32)         # b and d in use: a fresh array, not pooled
    assert rp.held_bytes() == 2 * rp.MIN_BYTES and not np.shares_memory(e, b)
    addr_b = b.ctypes.data
    del b, e
    assert rp.empty(BIG, np.float32).ctypes.data == addr_b   # the pooled one, not e's
    assert d.dtype == np.int32


def test_threads_never_share_an_array() -> None:
    """Threads asking at once each get an array no other live holder has."""
    got: list[np.ndarray] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(20):
            a = rp.empty(BIG, np.float32)
            with lock:
                got.append(a)
            if len(got) % 3 == 0:
                with lock:
                    got.pop(0)

    ts = [threading.Thread(target=take) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    addrs = [a.ctypes.data for a in got]
    assert len(addrs) == len(set(addrs))
