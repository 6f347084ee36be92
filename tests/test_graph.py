"""`ContractedDag` against a brute force: contracting two nodes is refused exactly when the
contracted graph has a path between them through a third node, and the order it keeps stays
topological (so the later checks can trust their windows)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from lamina.analysis.graph import ContractedDag
from strategies import examples


def _node_edges(n: int, edges: list[tuple[int, int]], root: dict[int, int]) -> set[tuple[int, int]]:
    return {(root[u], root[v]) for u, v in edges if root[u] != root[v]}


def _path_via_third(src: int, dst: int, node_edges: set[tuple[int, int]]) -> bool:
    """A path src -> x -> ... -> dst with x neither end, by a plain search."""
    succ: dict[int, list[int]] = {}
    for a, b in node_edges:
        succ.setdefault(a, []).append(b)
    stack = [x for x in succ.get(src, []) if x != dst]
    seen = set(stack)
    while stack:
        x = stack.pop()
        for y in succ.get(x, []):
            if y == dst:
                return True
            if y not in seen and y != src:
                seen.add(y)
                stack.append(y)
    return False


@st.composite
def _dags(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]], list[tuple[int, int]]]:
    n = draw(st.integers(2, 24))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
                          .filter(lambda e: e[0] < e[1]), max_size=3 * n))
    tries = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=2 * n))
    return n, edges, tries


def _built(n: int, edges: list[tuple[int, int]]) -> ContractedDag:
    """A ContractedDag of n nodes with `edges` added in order."""
    dag = ContractedDag(n)
    for u, v in edges:
        dag.add_edge(u, v)
    return dag


@settings(max_examples=examples(50))
@given(_dags())
def test_contract_is_exact_and_keeps_a_topological_order(case):
    n, edges, tries = case
    dag = _built(n, edges)
    for x, y in tries:
        a, b = dag.find(x), dag.find(y)
        if a == b:
            continue
        root = {i: dag.find(i) for i in range(n)}
        before = _node_edges(n, edges, root)
        cyclic = _path_via_third(a, b, before) or _path_via_third(b, a, before)
        keep, drop = min(a, b), max(a, b)
        assert dag.contract(keep, drop) is not cyclic, (edges, x, y)
        if not cyclic:
            assert dag.find(drop) == keep
        root = {i: dag.find(i) for i in range(n)}
        label = dag.order.label
        for p, q in _node_edges(n, edges, root):
            assert label[p] < label[q], (edges, tries)


@settings(max_examples=examples(50))
@given(_dags())
def test_reaches_names_a_node_on_a_path(case):
    n, edges, _ = case
    dag = _built(n, edges)
    src, dst = 0, n - 1
    items = [u for u, v in edges if v == dst]
    got = dag.reaches(src, dst, items)
    root = {i: i for i in range(n)}
    node_edges = _node_edges(n, edges, root)
    expected = next((i for i in items if i not in (src, dst)
                     and (_path_via_third(src, i, node_edges) or (src, i) in node_edges)), None)
    assert got == expected
