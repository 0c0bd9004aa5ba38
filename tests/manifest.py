"""Reading a replay selection's manifest part in tests, as the copier does
(``lakeq.store.replays.ReplayObjects.rows``): records (:mod:`lakeq.store.replay_manifest`) when the key
ends in ``.txt`` (the job's output since 2026-12-07); JSON Lines otherwise, gzipped when the key
ends in ``.gz`` (the job's output before 2026-11-25)."""
from __future__ import annotations

import gzip
import json

from lakeq.store import replay_manifest as records


def manifest_rows(key: str, data: bytes) -> list[dict]:
    """The rows of manifest part ``key`` whose stored bytes are ``data``."""
    if records.is_records(key):
        return records.rows_of(data)
    raw = gzip.decompress(data) if key.endswith(".gz") else data
    # split the bytes (as the copier does): str.splitlines would also split at a U+2028 in a value
    return [json.loads(x) for x in raw.splitlines() if x.strip()]
