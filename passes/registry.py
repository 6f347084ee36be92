"""Every pass `lamina-opt` and `lamina-run -p` know, by name: xDSL's generic cleanups plus Lamina's.

Passes are imported only when a pipeline names them (as xDSL does), so starting a tool does not
pay for every pass module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from xdsl.passes import ModulePass

# pass name -> (module, class)
PASSES: dict[str, tuple[str, str]] = {
    "canonicalize": ("xdsl.transforms.canonicalize", "CanonicalizePass"),
    "cse": ("xdsl.transforms.common_subexpression_elimination", "CommonSubexpressionElimination"),
    "dce": ("xdsl.transforms.dead_code_elimination", "DeadCodeElimination"),
    "fuse-elementwise": ("lamina.passes.fuse_elementwise", "FuseElementwise"),
    "fuse-attention": ("lamina.passes.fuse_attention", "FuseAttention"),
    "propagate-sharding": ("lamina.passes.propagate_sharding", "PropagateSharding"),
    "insert-collectives": ("lamina.passes.insert_collectives", "InsertCollectives"),
    "annotate-lifetimes": ("lamina.passes.annotate_lifetimes", "AnnotateLifetimes"),
    "assign-memory-tiers": ("lamina.passes.assign_memory_tiers", "AssignMemoryTiers"),
    "place-batch": ("lamina.passes.place_batch", "PlaceBatch"),
    "derive-backward": ("lamina.passes.derive_backward", "DeriveBackward"),
    "append-optimizer": ("lamina.passes.append_optimizer", "AppendOptimizer"),
    "accumulate-gradients": ("lamina.passes.accumulate_gradients", "AccumulateGradients"),
    "mixed-precision": ("lamina.passes.mixed_precision", "MixedPrecision"),
    "shard-optimizer": ("lamina.passes.shard_optimizer", "ShardOptimizer"),
    "pipeline-stages": ("lamina.passes.pipeline_stages", "PipelineStages"),
}


# what a pass does, for passes whose class has no docstring to say it (xDSL's); every other
# pass is described by the first line of its class docstring (`lamina-opt --list-passes`)
SUMMARIES: dict[str, str] = {
    "cse": "Eliminate common subexpressions: an op computing what an earlier op computed.",
    "dce": "Remove ops whose results are unused and that have no side effects.",
}


def _factory(module: str, cls: str) -> Callable[[], type[ModulePass]]:
    return lambda: getattr(importlib.import_module(module), cls)


def available_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Pass name -> factory returning the pass class."""
    return {name: _factory(module, cls) for name, (module, cls) in PASSES.items()}
