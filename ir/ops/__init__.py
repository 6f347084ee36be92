"""The op table and the dialect built from it: one row per op (`optable`) with its formula
(`formulas`, `rng`), value-range rule (`intervals`), scalar form (`scalar_forms`) and view rule
(`view_rules`); the op classes' shared bases (`opbase`), the generated classes (`lamina`, written
by `opgen`), and the region ops `lamina.fused` (`fused`, `attention`).

Above shapes (`core`), sharding rules and placements (`mesh`), VJP rules (`autodiff`) and memory
ops (`buffers`), which the rows and op classes use; below the text format and the builders.
"""
