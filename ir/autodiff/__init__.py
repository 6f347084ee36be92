"""Reverse-mode derivatives: each op's VJP rule (`vjp`), written in Lamina ops.

Below the op table, which names a rule per row: the rules build their ops through a structural
builder type (`vjp.Builder`), so they import neither the table nor the op classes.
"""
