"""Helpers shared by the memory-tier tests: parsing, custom-capacity targets, checked runs."""

from __future__ import annotations

import dataclasses

import lamina.backends.numpy.memory  # noqa: F401  (registers lamina.move / lamina.free)
from lamina.backends.interface import find_entry
from lamina.backends.numpy.memory import MemoryChecker
from lamina.backends.numpy.runner import run_function
from lamina.ir.mesh.target import Target, Tier, load_target
from lamina.ir.text.source import make_context, parse_text, verify


def parse(text: str, check: bool = True):
    ctx = make_context()
    m = parse_text(text, "t.mlir", ctx)
    if check:
        verify(m)
    return ctx, m


def target_with(hbm: float, host: float | None = None, base: str = "tiny") -> Target:
    t = load_target(base)
    tiers = tuple(Tier(x.name, hbm if x.name == "hbm" else
                       (host if x.name == "host" and host is not None else x.capacity),
                       x.bandwidth) for x in t.tiers)
    return dataclasses.replace(t, tiers=tiers)


def checked_run(module, inputs, target: Target | None = None, entry: str | None = None):
    checker = MemoryChecker(target)
    result = run_function(find_entry(module, entry), inputs, observer=checker)
    return result, checker
