"""Two places where moto is slow, made fast with moto's answers kept (the local stack and the tests;
never deployed): its UpdateExpression walk, and the whole-table copy TransactWriteItems makes to
roll back (see the section below: 1,201 ms → 3.4 ms a 3-put transaction on a 3,000-item table).

The walk.

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

import copy
import threading

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
    """Use :func:`_traverse` and the transactions' journal; False when turned off
    (LAKEQ_MOTO_PLAIN=1: moto left alone) or when moto's traversers differ (the walk left as moto's).
    The journal does not depend on the traversers and is installed whenever this is not turned off:
    the stream pumps keep an iterator at a shard's end on that condition alone
    (``infra.local.streams.SHARDS_KEPT``), and without the journal a cancelled transaction puts a
    copy of the shard in its place, which such an iterator never reads."""
    global _ORIGINAL_TWI
    from infra.local import moto_plain

    if moto_plain():
        return False
    from moto.dynamodb import models as ddb_models

    if _ORIGINAL_TWI is None:
        _ORIGINAL_TWI = ddb_models.DynamoDBBackend.transact_write_items
    ddb_models.DynamoDBBackend.transact_write_items = _transact_write_items
    ddb_models.copy = _COPY
    if not _maps_are_static():
        return False
    ast_nodes.DepthFirstTraverser.traverse = _traverse
    return True


def uninstall() -> None:
    from moto.dynamodb import models as ddb_models

    ast_nodes.DepthFirstTraverser.traverse = _ORIGINAL
    if _ORIGINAL_TWI is not None:
        ddb_models.DynamoDBBackend.transact_write_items = _ORIGINAL_TWI
    ddb_models.copy = copy


def installed() -> bool:
    from moto.dynamodb import models as ddb_models

    return (ast_nodes.DepthFirstTraverser.traverse is _traverse
            and ddb_models.DynamoDBBackend.transact_write_items is _transact_write_items)


# ----------------------------------------------------------------- TransactWriteItems' rollback copy
#
# moto's ``transact_write_items`` deep-copies every table a transaction names, whole, before it
# starts (once per item naming it), to put the copy back if the transaction is cancelled: each
# transaction costs the size of its tables. lakeq writes most things through transactions, so on a
# long-lived moto (the local stack's, e2e's) every produce and ack grew slower as its tables filled.
# :func:`_transact_write_items` keeps a journal instead: before moto's own code runs, a deep copy
# of each item the transaction names (or that it was absent) and each touched table's stream
# length; moto's table copies are made into the tables themselves (``_JournalCopy``) and, if moto
# cancels the transaction (where its own code puts its copies back), the journal puts those items and stream lengths back —
# the state moto's own rollback restores, at the cost of the items touched.

_ORIGINAL_TWI = None


class _Journal:
    def __init__(self, backend, transact_items) -> None:
        from moto.dynamodb.models.dynamo_type import DynamoType

        self.entries = []  # (table, hash, range or None, had partition, the item's copy or None)
        self.streams = {}  # id(table) -> (table, its stream shard, the shard's length)
        # the tables moto backs up (and puts back whole when it cancels): those an item names by
        # name; an item naming one of them by its ARN is undone with it, one naming another
        # table by ARN only is not (moto's own rollback misses it)
        backed = {}
        for entry in transact_items:
            try:
                name = next(iter(entry.values())).get("TableName")
                if name and name in backend.tables:
                    backed[id(backend.tables[name])] = backend.tables[name]
            except Exception:  # noqa: BLE001 - moto refuses it before it writes anything
                continue
        for table in backed.values():
            if table.stream_shard is not None:
                self.streams[id(table)] = (table, table.stream_shard, len(table.stream_shard.items))
        seen = set()
        for entry in transact_items:
            try:
                op_type, op = next(iter(entry.items()))
                name = op.get("TableName")
                table = backend.tables.get(name) or next(
                    (t for t in backend.tables.values() if t.table_arn == name), None)
                if table is None or id(table) not in backed:
                    continue
                key = op["Item"] if op_type == "Put" else op["Key"]
                h = DynamoType(key[table.hash_key_attr])
                r = DynamoType(key[table.range_key_attr]) if table.range_key_attr is not None else None
                hash(h), hash(r)
            except Exception:  # a malformed item: moto refuses it before it writes anything
                continue
            if (id(table), h, r) in seen:
                continue
            seen.add((id(table), h, r))
            part = table.items.get(h)
            current = (part.get(r) if isinstance(part, dict) else None) if r is not None else part
            self.entries.append((table, h, r, part is not None, copy.deepcopy(current)))

    def rollback(self) -> None:
        for table, h, r, had, item in reversed(self.entries):
            if r is None:
                if item is None:
                    table.items.pop(h, None)
                else:
                    table.items[h] = item
            elif item is None:
                part = table.items.get(h)
                if part is not None:
                    part.pop(r, None)
                    if not part and not had:
                        table.items.pop(h, None)
            else:
                table.items[h][r] = item
        for table, shard, n in self.streams.values():
            del shard.items[n:]
            table.stream_shard = shard


class _JournalCopy:
    """``copy`` for moto's dynamodb models module: during a journalled transaction (this thread's
    ``_active.tables``) a table's "copy" is the table itself (the journal restores it); anything
    else is copied as ``copy`` does."""

    def deepcopy(self, obj, memo=None):
        if id(obj) in getattr(_active, "tables", ()):
            return obj
        return copy.deepcopy(obj, memo)

    def __getattr__(self, name):
        return getattr(copy, name)


_active = threading.local()
_COPY = _JournalCopy()


def _transact_write_items(self, transact_items):
    if len(transact_items) > 100:  # moto's own refusal, before anything
        return _ORIGINAL_TWI(self, transact_items)
    journal = _Journal(self, transact_items)
    _active.tables = {id(t) for t in self.tables.values()}
    from moto.dynamodb import exceptions as ex

    try:
        return _ORIGINAL_TWI(self, transact_items)
    except ex.TransactWriteSingleOpException:
        raise  # moto raises it outside its rollback: the writes of the items before it stay
    except (ex.TransactionCanceledException, ex.MockValidationException):
        journal.rollback()  # where moto puts its copies back
        raise
    finally:
        _active.tables = ()
