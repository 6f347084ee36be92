"""The options of the JAX backend (importing this module does not start jax)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JaxOptions:
    """Where the JAX backend runs a program.

    devices        devices to run on, per process (None: the mesh's size); on CPU, the host device
                   count XLA is started with
    coordinator    multi-process: the coordinator's host:port (process 0 serves it); None runs in
                   this process alone
    num_processes  multi-process: how many processes take part (with `coordinator`)
    process_id     multi-process: this process's number, 0 .. num_processes-1
    """

    devices: int | None = None
    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
