"""The devices a JAX run uses: XLA's host device count, the multi-process runtime, the device list.

On CPU, XLA makes as many host devices as `--xla_force_host_platform_device_count` in XLA_FLAGS
says, read once, when jax starts its backends (on the first computation or device query, not on
`import jax`). `prepare` therefore sets that flag before anything asks jax for a device: to
`JaxOptions.devices` when given, else to the mesh's size (never fewer than XLA_FLAGS already asks
for, so a test session's 8 devices stay 8). On a GPU or TPU machine the flag does nothing and the
accelerators are the devices. A mesh larger than the devices available is one diagnostic naming
both numbers, also when jax was already started (by the caller) with fewer.

Multi-process (`JaxOptions.coordinator`, `num_processes`, `process_id`): every process calls
`jax.distributed.initialize` with the same coordinator address before its backends start; then
`jax.devices()` lists every process's devices (process-major), `--devices` is the count per
process, and the mesh is built over the global list. On Slurm or Open MPI clusters jax can find
these values itself (`jax.distributed.initialize()` without arguments); Lamina passes what the
command line says. jax's CPU collectives across processes (Gloo) print connection lines on the
process's stdout from native code; `native_stdout_to_stderr` sends native output to stderr for
the rest of a multi-process run, without those lines, so that stdout carries only what
lamina-run prints (`--stats-json -`, `--print-outputs`) and stderr only what Lamina says.
"""

from __future__ import annotations

import atexit
import math
import os
import re
import sys
import threading
from typing import Any

import jax
from lamina.backends.jax.options import JaxOptions
from lamina.ir.core.diagnostics import LaminaError

# a jax device (`jax.Device`; jaxlib ships no type information for it, so the checker sees Any)
Device = Any
COUNT_FLAG = "--xla_force_host_platform_device_count"
# seconds a process waits for the others to join (jax's default is 300)
JOIN_TIMEOUT_S = 120
_COUNT = re.compile(re.escape(COUNT_FLAG) + r"=(\d+)")


def backends_started() -> bool:
    """Whether jax has created its backends (after which XLA_FLAGS is no longer read)."""
    from jax._src import xla_bridge  # the one place jax says so; no public equivalent in 0.10

    return bool(xla_bridge.backends_are_initialized())


def flag_count(flags: str) -> int | None:
    m = _COUNT.search(flags)
    return int(m.group(1)) if m else None


def with_count(flags: str, count: int) -> str:
    """`flags` (an XLA_FLAGS value) asking for `count` host devices."""
    rest = _COUNT.sub("", flags).strip()
    return f"{rest} {COUNT_FLAG}={count}".strip()


def _distributed_started() -> bool:
    from jax._src import distributed  # jax.distributed has no public "is initialized" in 0.10

    return distributed.global_state.client is not None


def start_processes(options: JaxOptions) -> None:
    """Join the multi-process runtime (a no-op without a coordinator, or when already joined)."""
    if options.coordinator is None or _distributed_started():
        return
    if options.num_processes is None or options.process_id is None:
        raise LaminaError("--coordinator needs --num-processes and --process-id")
    native_stdout_to_stderr()
    try:
        jax.distributed.initialize(coordinator_address=options.coordinator,
                                   num_processes=options.num_processes,
                                   process_id=options.process_id,
                                   initialization_timeout=JOIN_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - jax raises RuntimeError/XlaRuntimeError/ValueError
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise LaminaError(f"backend 'jax': cannot join the {options.num_processes}-process run "
                          f"at {options.coordinator} as process {options.process_id}: "
                          f"{first}") from None


def prepare(mesh_name: str | None, needed: int, options: JaxOptions) -> list[Device]:
    """The first `needed` devices of the mesh (global, process-major; without a mesh this
    process's first device), after setting the host device count and joining the multi-process
    run; LaminaError when there are fewer (see the docstring)."""
    what = f"mesh @{mesh_name} has {needed} devices" if mesh_name else f"the run needs {needed}"
    procs = options.num_processes or 1
    if options.devices is not None:
        if options.devices < 1:
            raise LaminaError(f"--devices must be at least 1, got {options.devices}")
        if options.devices * procs < needed:
            total = f"{options.devices * procs} ({procs} processes x {options.devices})" \
                if procs > 1 else str(options.devices)
            raise LaminaError(f"backend 'jax': {what}, but --devices gives {total}")
    started = backends_started()
    if not started:
        flags = os.environ.get("XLA_FLAGS", "")
        count = options.devices if options.devices is not None else \
            max(math.ceil(needed / procs), flag_count(flags) or 1)
        os.environ["XLA_FLAGS"] = with_count(flags, count)
    start_processes(options)
    devices = jax.devices()
    if len(devices) < needed:
        why = ""
        if started and devices[0].platform == "cpu":
            why = (f" (jax was started before Lamina could set XLA's host device count: set "
                   f"XLA_FLAGS={COUNT_FLAG}={needed} before it starts)")
        raise LaminaError(f"backend 'jax': {what}, but jax has only {len(devices)} "
                          f"{devices[0].platform} devices{why}")
    return devices[:needed] if mesh_name else jax.local_devices()[:1]


def native_stdout_to_stderr() -> None:
    """From now on, file descriptor 1 (where native libraries write) goes to stderr, less Gloo's
    connection lines, and Python's `sys.stdout` keeps writing to the real stdout (for the rest
    of the process: Gloo also prints when communicators open lazily and at shutdown).

    Gloo's `[Gloo] Rank 0 is connected to 1 peer ranks...` lines (16 in a 2 x 4 run) are about
    jax's transport, not the program: a thread reads fd 1 through a pipe and forwards every
    other line to stderr, so a native message that matters is still seen."""
    sys.stdout.flush()
    real = os.dup(1)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 1)
    os.close(write_end)
    sys.stdout = open(real, "w", buffering=1, closefd=True)  # stays open: it is stdout now
    forwarder = threading.Thread(target=_forward_native_output, args=(read_end,),
                                 name="lamina-native-stdout", daemon=True)
    forwarder.start()

    def drain() -> None:
        # at exit: close the pipe's write end (fd 1) so the thread sees its end and forwards
        # what is left; Gloo's shutdown lines after this point are dropped with the pipe
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
        forwarder.join(timeout=2.0)

    atexit.register(drain)


def _forward_native_output(fd: int) -> None:
    """Copy the lines written to pipe `fd` to stderr, except Gloo's (see above)."""
    with open(fd, "rb", buffering=0, closefd=True) as pipe:
        for line in iter(pipe.readline, b""):
            if not line.startswith(b"[Gloo]"):
                os.write(2, line)
