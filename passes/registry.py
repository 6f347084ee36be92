"""Every pass `lamina-opt` and `lamina-run -p` know, by name: xDSL's generic cleanups plus Lamina's."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass


def _canonicalize() -> type[ModulePass]:
    from xdsl.transforms.canonicalize import CanonicalizePass

    return CanonicalizePass


def _cse() -> type[ModulePass]:
    from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination

    return CommonSubexpressionElimination


def _dce() -> type[ModulePass]:
    from xdsl.transforms.dead_code_elimination import DeadCodeElimination

    return DeadCodeElimination


def available_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Pass name -> factory returning the pass class (imported lazily, as xDSL does)."""
    return {
        "canonicalize": _canonicalize,
        "cse": _cse,
        "dce": _dce,
        "fuse-elementwise": lambda: __import__("lamina.passes.fuse_elementwise", fromlist=["_"]).FuseElementwise,
        "propagate-sharding": lambda: __import__("lamina.passes.propagate_sharding",
                                                 fromlist=["_"]).PropagateSharding,
        "insert-collectives": lambda: __import__("lamina.passes.insert_collectives",
                                                 fromlist=["_"]).InsertCollectives,
        "annotate-lifetimes": lambda: __import__("lamina.passes.annotate_lifetimes",
                                                 fromlist=["_"]).AnnotateLifetimes,
        "assign-memory-tiers": lambda: __import__("lamina.passes.assign_memory_tiers",
                                                  fromlist=["_"]).AssignMemoryTiers,
    }
