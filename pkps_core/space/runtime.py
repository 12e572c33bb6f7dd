"""Threads, BLAS limits and reusable buffers: the only process-wide state of the library.

Array work of a fit runs on a :class:`WorkerPool` of its own while BLAS itself is held to
one thread (:func:`single_threaded_blas`): OpenBLAS keeps its threads spinning for a while
after each product, and on a machine with few cores they slow any other threads that run
meanwhile. The BLAS limit is process-wide by nature (it is the library's setting), so it
is reference-counted: concurrent fits share one limit and the last one out restores it;
nobody waits for another's work. Large scratch buffers are recycled through
:func:`borrow_buffer`, because a fresh one costs page faults on first touch; for the same
reason the project's programs (the ``pkps`` command, the app, the tests) ask glibc's
``malloc`` to keep freed memory for reuse (:func:`keep_freed_memory`).

Measured limitation: OpenBLAS (0.3.30/0.3.31 here) ignores ``openblas_set_num_threads``
called from a thread other than the main one once its own worker threads have run, so a
fit started from a non-main thread (an app session) may keep BLAS multi-threaded; the
results are the same, only the threads compete.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
from threadpoolctl import ThreadpoolController

# Idle buffers kept for reuse: at most this many, the largest first.
MAX_IDLE_BUFFERS = 1

_CONTROLLER: ThreadpoolController | None = None
_CONTROLLER_MODULES = 0
_STATE_LOCK = threading.Lock()  # held only while the limit or the idle list changes
_LIMIT_DEPTH = 0
_LIMITER = None
_UNLIMITED_THREADS = 1
_IDLE_BUFFERS: list[np.ndarray] = []

# glibc's malloc padding (keep_freed_memory): the environment variable that overrides it
MALLOC_PAD_ENV = "PKPS_MALLOC_PAD_MB"
DEFAULT_MALLOC_PAD_MB = 256
_M_TOP_PAD = -2  # mallopt's parameter numbers in glibc's malloc.h
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest (its dynamic threshold's ceiling)
_MALLOC_PAD_BYTES = 0  # what keep_freed_memory set in this process
_MALLOC_ASKED = 0  # the last pad it tried, set or not (the app asks at every script run)


def _controller() -> ThreadpoolController:
    """threadpoolctl's view of the loaded BLAS libraries.

    The search costs about 5 ms, so it is redone only when modules were imported since the
    last one: a BLAS library loaded later (scipy's own OpenBLAS, torch's) would otherwise
    escape the limit.
    """
    global _CONTROLLER, _CONTROLLER_MODULES
    if _CONTROLLER is None or _CONTROLLER_MODULES != len(sys.modules):
        _CONTROLLER_MODULES = len(sys.modules)
        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER


def _current_blas_threads() -> int:
    counts = [
        info.get("num_threads", 1)
        for info in _controller().info()
        if info.get("user_api") == "blas"
    ]
    return int(max(counts)) if counts else 1


def blas_threads() -> int:
    """How many threads BLAS may use when no fit limits it (1 when unknown)."""
    with _STATE_LOCK:
        if _LIMIT_DEPTH > 0:
            return _UNLIMITED_THREADS
    return _current_blas_threads()


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """BLAS on one thread while any caller is inside.

    Reference-counted: the first caller in sets the limit, the last one out restores what
    BLAS had before; concurrent and nested callers only count. This is the library's one
    mechanism for limiting BLAS threads.
    """
    global _LIMIT_DEPTH, _LIMITER, _UNLIMITED_THREADS
    with _STATE_LOCK:
        if _LIMIT_DEPTH == 0:
            _UNLIMITED_THREADS = _current_blas_threads()
            _LIMITER = _controller().limit(limits=1, user_api="blas")
        _LIMIT_DEPTH += 1
    try:
        yield
    finally:
        with _STATE_LOCK:
            _LIMIT_DEPTH -= 1
            if _LIMIT_DEPTH == 0:
                _LIMITER.restore_original_limits()
                _LIMITER = None


@contextmanager
def borrow_buffer(size: int) -> Iterator[np.ndarray]:
    """A float64 buffer of ``size`` elements (contents undefined) for the caller alone.

    On exit it goes back to a short idle list (:data:`MAX_IDLE_BUFFERS`) for the next
    caller: touching fresh memory costs 10–70 ms of page faults for the 70 MB transfer
    buffer of a medium cache, about a third of a whole fit.
    """
    with _STATE_LOCK:
        fitting = [k for k, buffer in enumerate(_IDLE_BUFFERS) if buffer.size >= size]
        buffer = _IDLE_BUFFERS.pop(fitting[0]) if fitting else None
    if buffer is None:
        buffer = np.empty(size)
    try:
        yield buffer[:size]
    finally:
        with _STATE_LOCK:
            _IDLE_BUFFERS.append(buffer)
            _IDLE_BUFFERS.sort(key=lambda b: -b.size)
            del _IDLE_BUFFERS[MAX_IDLE_BUFFERS:]


def release_buffers() -> None:
    """Free the idle buffers (they are only an optimisation)."""
    with _STATE_LOCK:
        _IDLE_BUFFERS.clear()


class WorkerPool:
    """Worker threads of one fit for numpy work that releases the GIL.

    Every parallel operation runs with BLAS on one thread, so the pool's threads are the
    only ones working. ``threads`` defaults to the number BLAS may use. Threads start on
    first use and stop with :meth:`close` (or when the pool is garbage-collected).

    Parameters
    ----------
    threads : int, optional
    """

    def __init__(self, threads: int | None = None):
        self.threads = max(1, int(blas_threads() if threads is None else threads))
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._local = threading.local()

    def map(self, fn: Callable, items: Iterable) -> list:
        """``[fn(x) for x in items]`` on the pool's threads (BLAS on one thread)."""
        items = list(items)
        if self.threads <= 1 or len(items) <= 1:
            with single_threaded_blas():
                return [fn(item) for item in items]
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="pkps")
            executor = self._executor
        with single_threaded_blas():
            return list(executor.map(fn, items))

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``a @ b`` with the rows of ``a`` split over the threads."""
        if self.threads <= 1 or a.shape[0] < 2 * self.threads:
            with single_threaded_blas():
                return a @ b
        out = np.empty((a.shape[0], b.shape[1]))
        edges = np.linspace(0, a.shape[0], self.threads + 1).round().astype(int)
        self.map(
            lambda i: np.matmul(a[edges[i] : edges[i + 1]], b, out=out[edges[i] : edges[i + 1]]),
            range(self.threads),
        )
        return out

    def inner(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``a @ b.T`` for short, very wide ``a`` and ``b`` (the contraction of the
        transfers), with the shared inner dimension split over the threads: each reads its
        own part of both once, where splitting rows would have every thread read all of
        ``b``."""
        if self.threads <= 1 or a.shape[1] < 2 * self.threads:
            with single_threaded_blas():
                return a @ b.T
        edges = np.linspace(0, a.shape[1], self.threads + 1).round().astype(int)
        parts = self.map(
            lambda i: a[:, edges[i] : edges[i + 1]] @ b[:, edges[i] : edges[i + 1]].T,
            range(self.threads),
        )
        return np.sum(parts, axis=0)

    def scratch(self, size: int) -> np.ndarray:
        """A buffer of at least ``size`` doubles for the calling thread (contents
        undefined), kept by the pool for that thread's next call."""
        buffer = getattr(self._local, "buffer", None)
        if buffer is None or buffer.size < size:
            buffer = self._local.buffer = np.empty(size)
        return buffer[:size]

    def close(self) -> None:
        """Stop the threads (work already queued still runs)."""
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=False)
                self._executor = None

    def __del__(self):
        executor = getattr(self, "_executor", None)
        if executor is not None:
            executor.shutdown(wait=False)


def keep_freed_memory(megabytes: int | None = None) -> int:
    """Have glibc's ``malloc`` keep up to ``megabytes`` of freed memory for reuse, for the
    rest of the process; returns the pad in effect, in bytes (0: none set).

    By default glibc gives the top of its heap back to the kernel as soon as 128 KiB there
    are free, and serves a request over its mmap threshold (128 KiB at first, moved up to
    the size of the last such block freed, 32 MiB at most) from a fresh mapping: a fit
    allocates and frees temporaries of megabytes thousands of times, and every page of each
    fresh one is a page fault in which the kernel hands over a zeroed page. This sets
    ``M_MMAP_THRESHOLD`` to that 32 MiB at once (smaller blocks come from the heap) and
    ``M_TOP_PAD`` to ``megabytes`` (the heap grows by that much more at once, and keeps that
    much free at its top when it shrinks; a thread's arena keeps the same), so such a
    temporary is served from pages already mapped. ``bench/malloc_pad.py`` measures it
    (the table is in ``docs/development.md``): the page faults of the synthetic study of
    ``tests/test_claims.py`` fall about sixfold, with the same peak memory. The memory kept
    stays the process's, for its own reuse, until it exits.

    The project's programs call this at their start (``pkps`` / ``python -m pkps_core``,
    the app, the tests); the library does not on import, so a program that embeds it
    keeps its own ``malloc`` settings. ``megabytes`` defaults to the environment variable
    :data:`MALLOC_PAD_ENV` (``PKPS_MALLOC_PAD_MB``), else :data:`DEFAULT_MALLOC_PAD_MB`;
    0 sets nothing. Nothing is set where the C library is not glibc.

    Raises
    ------
    ValueError
        ``megabytes`` or ``PKPS_MALLOC_PAD_MB`` is not a whole number from 0 to 2047.
    """
    global _MALLOC_PAD_BYTES, _MALLOC_ASKED
    from_env, given = megabytes is None, megabytes
    if from_env:
        given = os.environ.get(MALLOC_PAD_ENV, "").strip() or DEFAULT_MALLOC_PAD_MB
    try:
        megabytes = int(given)
    except (TypeError, ValueError):
        megabytes = -1
    if not 0 <= megabytes < 2048:  # mallopt takes an int of bytes
        where = f"{MALLOC_PAD_ENV}=" if from_env else "megabytes="
        raise ValueError(
            f"{where}{given!r}: give a whole number of megabytes from 0 to 2047 (0 leaves "
            "malloc's settings alone)"
        )
    pad = megabytes << 20
    with _STATE_LOCK:
        if pad == 0 or pad == _MALLOC_ASKED:  # tried already: the C library is not asked again
            return _MALLOC_PAD_BYTES
        _MALLOC_ASKED = pad
        if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
            return _MALLOC_PAD_BYTES
        try:
            libc = ctypes.CDLL(None)
            # the threshold first: each call fixes what glibc would otherwise move
            libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(MMAP_THRESHOLD_BYTES))
            applied = libc.mallopt(_M_TOP_PAD, ctypes.c_int(pad)) == 1
            if applied:
                # a block just under the threshold, taken and given back: where the heap's
                # top is short of it, the heap grows by it and the pad now (address space
                # only: no page is touched), so the next large temporary fits there
                libc.malloc.restype = ctypes.c_void_p
                libc.free.argtypes = [ctypes.c_void_p]
                libc.free(libc.malloc(ctypes.c_size_t(MMAP_THRESHOLD_BYTES - (1 << 20))))
        except (OSError, AttributeError):  # no mallopt in this C library
            applied = False
        if applied:
            _MALLOC_PAD_BYTES = pad
        return _MALLOC_PAD_BYTES


def malloc_pad_bytes() -> int:
    """What :func:`keep_freed_memory` set in this process (0: nothing)."""
    return _MALLOC_PAD_BYTES


def peak_rss_bytes() -> int:
    """This process's peak resident memory since it started or since :func:`reset_peak_rss`.

    Reads ``VmHWM`` from ``/proc/self/status`` where there is one (Linux). ``ru_maxrss``
    is the fallback elsewhere, but it is a lifetime figure that on Linux also carries the
    resident size of the parent at the moment a spawned process was forked (a Dask
    worker started from a large pytest process reports the parent's memory as its own).
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def reset_peak_rss() -> bool:
    """Start :func:`peak_rss_bytes` again from the current resident size (Linux only).

    Returns False where the kernel offers no reset, and the peak stays a lifetime one:
    where ``/proc/self/clear_refs`` is missing or read-only, and where writing to it is
    accepted but does nothing (some sandboxed kernels, e.g. gVisor, take the write and keep
    ``VmHWM``), which is seen as a peak still above the current resident size afterwards.
    """
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    peak, resident = _status_kib("VmHWM"), _status_kib("VmRSS")
    if peak is None or resident is None:
        return False
    # right after a reset the peak is the resident size, give or take what the reads touched
    return peak - resident <= 8 << 10


def _status_kib(field: str) -> int | None:
    """One ``kB`` field of ``/proc/self/status``, or None where it is not there."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None
