"""Reading a replay selection's manifest part in tests, as the copier does
(``lakeq.store.replays.ReplayStore.rows``): JSON Lines, gzipped when the key ends in ``.gz`` (the
job's output before 2026-11-25), plain otherwise."""
from __future__ import annotations

import gzip
import json


def manifest_rows(key: str, data: bytes) -> list[dict]:
    """The rows of manifest part ``key`` whose stored bytes are ``data``."""
    raw = gzip.decompress(data) if key.endswith(".gz") else data
    # split the bytes (as the copier does): str.splitlines would also split at a U+2028 in a value
    return [json.loads(x) for x in raw.splitlines() if x.strip()]
