"""The memory-tier plan as a numbers-only problem, and the two solvers of it.

`assign-memory-tiers` (`lamina.passes.assign_memory_tiers`) turns a function into a `Problem`,
asks a solver for a `Plan` and rewrites the function from it. The problem knows nothing of the
IR, so the solvers are tested and benchmarked on random instances alone:

- `problem`: the model (values, gaps, plans), its feasibility and its cost (`plan_cost`), the one
  objective both solvers minimize;
- `greedy`: the default solver (sweep, polish, local search), fast enough for any program, with
  `covering`, its index of the gaps over a step;
- `ilp`: the exact reference (`scipy.optimize.milp`, HiGHS), for small programs and for measuring
  the greedy solver's gap.
"""
