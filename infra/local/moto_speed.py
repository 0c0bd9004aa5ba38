"""A faster walk of moto's UpdateExpression trees (the local stack and the tests; never deployed).

Profiled on the queue model (tests/integration/test_queue_model.py, one part: 14,061 store calls),
moto's ``UpdateExpressionValidator`` took 8.7 of the part's 90 s: it walks the expression's tree ten
times (one processor each), and moto's ``DepthFirstTraverser`` builds its processor's class map
(a new dict, then a tuple of its keys) at every node it visits, twice. A lakeq write sets ten to
fifteen attributes in one expression (``OffsetRepo.write_state``), so each UpdateItem paid ~10 ms
for that bookkeeping alone.

:func:`install` replaces ``DepthFirstTraverser.traverse`` with the same depth-first, bottom-up walk
that builds the map once per walk and looks the processor of each node type up once (moto's
nodes are ABCs, whose ``isinstance`` is slow; ``isinstance`` of a class is ``issubclass`` of the
instance's type, for these classes that register no virtual subclasses): no traverser overrides
moto's walk (checked by :func:`_maps_are_static` before installing), so the nodes processed,
their order, the processor chosen for each (the first class in the map's order that the node is
an instance of) and the tree's rewiring are those of moto's own code. :func:`uninstall` puts moto's back
(tests/integration/test_moto_direct.py::test_moto_speed_walks_update_expressions_as_moto_does runs one
script of updates both ways and compares every answer, error and item). ``_maps_are_static`` checks
the walk's methods only: that each ``_processing_map`` returns the same map throughout a walk holds
for moto 5.2.5's traversers (literal dicts of bound methods; pyproject pins moto) and must be
checked again on an upgrade. ``LAKEQ_MOTO_PLAIN=1`` leaves moto as it is.
"""
from __future__ import annotations

import os

from moto.dynamodb.parsing import ast_nodes

_ORIGINAL = ast_nodes.DepthFirstTraverser.traverse


def _traverse(self, node):
    """moto's ``traverse_node_recursively`` from the root, the processor map built once and the
    processor of each node type looked up once (moto's nodes are ABCs: ``isinstance`` is slow)."""
    pmap = tuple(self._processing_map().items())
    pre = self.pre_processing_of_child
    node_cls = ast_nodes.Node
    by_type: dict[type, object] = {}  # a node type → its processor (None: not processed; _SKIP: no Node)

    def processor_of(t: type):
        if not issubclass(t, node_cls):
            p = _SKIP
        else:
            p = next((fn for cls, fn in pmap if issubclass(t, cls)), None)
        by_type[t] = p
        return p

    def walk(node, child_id=-1):
        t = type(node)
        p = by_type[t] if t in by_type else processor_of(t)
        if p is _SKIP:
            return node
        parent_node = node.parent
        if node.children is not None:
            for i, child_node in enumerate(node.children):
                pre(node, i)
                walk(child_node, i)
        if p is not None:
            node = p(node)
            node.parent = parent_node
            if parent_node:
                parent_node.children[child_id] = node
        return node
    return walk(node)


_SKIP = object()


def _maps_are_static() -> bool:
    """Every traverser in moto's parsing package keeps moto's walk (none overrides it) — the
    condition for :func:`_traverse` to be moto's walk."""
    from moto.dynamodb.parsing import validators  # noqa: F401  (defines the traversers)

    def subclasses(c):
        for s in c.__subclasses__():
            yield s
            yield from subclasses(s)
    base = ast_nodes.DepthFirstTraverser
    for c in subclasses(base):
        for name in ("traverse", "traverse_node_recursively", "process", "nodes_to_be_processed"):
            if getattr(c, name) is not getattr(base, name):
                return False
    return True


def install() -> bool:
    """Use :func:`_traverse`; False (moto left alone) when turned off or moto's traversers differ."""
    if os.environ.get("LAKEQ_MOTO_PLAIN", "") in ("1", "true") or not _maps_are_static():
        return False
    ast_nodes.DepthFirstTraverser.traverse = _traverse
    return True


def uninstall() -> None:
    ast_nodes.DepthFirstTraverser.traverse = _ORIGINAL


def installed() -> bool:
    return ast_nodes.DepthFirstTraverser.traverse is _traverse
