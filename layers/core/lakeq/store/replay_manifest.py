"""The replay manifest's record format (issue 32 item 3; docs/design.md "Replay", Output): pure,
no AWS, no Spark — the selection job writes it (``lakeq_lake.replay.record_column``, Spark's text
writer: ``part-NNNNN-….txt``), the copier reads it (:func:`iter_rows` over a streamed object).

Why not JSON Lines any more: Spark's JSON writer escapes every string character by character, ~2 µs
a row — about half of an unfiltered 10M-row selection (docs/benchmarks.md). Here each string is
written as its bytes, unescaped, after a header giving its length, so the writer only copies.

A record, in bytes::

    queue,inc,offset,produced_at,Lid,Lkey,Ltags,Lproperties,Lbody,Lclaim:<id><key><tags><properties><body><claim>\\n

The header is ASCII: the four integers in decimal (a null one: empty), then each text field's
length in bytes of UTF-8 (``-1``: null). ``tags`` is the JSON array's text; ``properties`` and
``claim`` are the JSON texts the manifest always held. No byte of a value is escaped or looked at:
a body may hold newlines, quotes, colons, any character. A row decodes to the dict the JSON Lines
manifest gave (:data:`COLUMNS`, null fields left out, as Spark's JSON writer leaves them out).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from lakeq.common.errors import LakeqError

SUFFIX = ".txt"  # the parts' names as Spark's text writer makes them: part-NNNNN-<uuid>-c000.txt
FORMAT = "records/1"  # selection.json's ``manifest_format``
INTS = ("queue", "inc", "offset", "produced_at")
TEXTS = ("id", "key", "tags", "properties", "body", "claim")
COLUMNS = ("queue", "offset", "id", "key", "tags", "properties", "produced_at", "body", "claim", "inc")
CHUNK = 1 << 16


class BadRecord(LakeqError, ValueError):
    """A manifest part that is not a sequence of whole records (truncated or not this format)."""


def is_records(key: str) -> bool:
    """True when manifest part ``key`` is in this format (by its name: ``….txt``)."""
    return key.endswith(SUFFIX)


def encode(row: Mapping[str, Any]) -> bytes:
    """One record of ``row`` (the manifest's columns; absent = null) — what the job's Spark
    expression writes, byte for byte (tested against it)."""
    ints = [b"" if row.get(c) is None else str(int(row[c])).encode() for c in INTS]
    texts = []
    for c in TEXTS:
        v = row.get(c)
        if c == "tags" and v is not None:
            v = json.dumps(list(v), ensure_ascii=False, separators=(",", ":"))
        texts.append(None if v is None else str(v).encode("utf-8"))
    head = b",".join(ints + [str(-1 if t is None else len(t)).encode() for t in texts])
    return head + b":" + b"".join(t or b"" for t in texts) + b"\n"


def encode_all(rows: Iterable[Mapping[str, Any]]) -> bytes:
    return b"".join(encode(r) for r in rows)


def _row(head: list[bytes], lens: list[int], buf: bytes, at: int) -> dict:
    out: dict[str, Any] = {}
    vals: dict[str, Any] = {}
    for c, h in zip(INTS, head[:4], strict=True):
        if h:
            vals[c] = int(h)
    for c, n in zip(TEXTS, lens, strict=True):
        if n >= 0:
            v = buf[at:at + n].decode("utf-8")
            vals[c] = json.loads(v) if c == "tags" else v
            at += n
    for c in COLUMNS:  # the JSON manifest's key order
        if c in vals:
            out[c] = vals[c]
    return out


def iter_rows(read: Callable[[int], bytes]) -> Iterator[dict]:
    """The rows of a part streamed by ``read(n)`` (a file's or an S3 body's ``read``), each a dict
    of its non-null :data:`COLUMNS`. Memory: one read chunk plus one record. Raises
    :class:`BadRecord` on a malformed header or a truncated record."""
    buf, pos, eof = b"", 0, False

    def more() -> bool:
        nonlocal buf, pos, eof
        if eof:
            return False
        chunk = read(CHUNK)
        if not chunk:
            eof = True
            return False
        buf, pos = buf[pos:] + chunk, 0
        return True

    while True:
        colon = buf.find(b":", pos)
        while colon < 0:
            if not more():
                if buf[pos:].strip():
                    raise BadRecord(f"a record without its header's end: {buf[pos:pos + 80]!r}")
                return
            colon = buf.find(b":", pos)
        head = buf[pos:colon].split(b",")
        if len(head) != len(INTS) + len(TEXTS):
            raise BadRecord(f"a header of {len(head)} fields: {buf[pos:colon][:80]!r}")
        try:
            lens = [int(x) for x in head[len(INTS):]]
        except ValueError:
            raise BadRecord(f"a header with a length that is not a number: {buf[pos:colon][:80]!r}") from None
        need = sum(n for n in lens if n > 0) + 1
        while len(buf) - (colon + 1) < need:
            at = colon - pos
            if not more():
                raise BadRecord("a record cut short")
            colon = at
        end = colon + 1 + need
        if buf[end - 1:end] != b"\n":
            raise BadRecord("a record not ended by a line break where its lengths say")
        try:
            yield _row(head, lens, buf, colon + 1)
        except ValueError as e:
            raise BadRecord(f"a record whose header or tags do not parse: {e}") from None
        pos = end


def rows_of(data: bytes) -> list[dict]:
    """Every row of a whole part's bytes."""
    it = iter([data])
    return list(iter_rows(lambda n: next(it, b"")))
