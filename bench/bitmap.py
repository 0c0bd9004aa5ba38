"""Tag bitmap benchmark (SPEC §2): false-positive rate by tags per message, and filter speed.

1. For k = 1..4 bits per tag and n = 1..16 tags per message, the measured false-positive rate of the
   index test ``B & h(x) == h(x)`` for a tag x the message does not carry, next to the Bloom formula
   ``(1 - (1 - 1/64)^(k n))^k``.
2. Filtering a segment for a selective subscription: the bitmap test on each index entry (decode
   only the passing ones, then the exact re-check) versus the baseline that decodes every message
   header and checks its tag list — both run side by side here, same data, same process.

    python bench/bitmap.py [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import string
import sys
import time

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", "layers", "matcher"),
                os.path.join(os.path.dirname(__file__), "..", "layers", "core")]

from matcher import bitmap  # noqa: E402


def rand_tag(rng: random.Random) -> str:
    return "".join(rng.choices(string.ascii_letters + string.digits, k=rng.randint(3, 12)))


def fp_table(trials: int, rng: random.Random) -> list[tuple[int, int, float, float]]:
    rows = []
    for k in (1, 2, 3, 4):
        bitmap.tag_hash.cache_clear()
        for n in (1, 2, 4, 8, 16):
            fp = 0
            for _ in range(trials):
                tags = {rand_tag(rng) for _ in range(n)}
                b = bitmap.tags_bitmap(tags, k)
                x = rand_tag(rng)
                while x in tags:
                    x = rand_tag(rng)
                h = bitmap.tag_hash(x, k)
                fp += (b & h) == h
            rows.append((k, n, fp / trials, (1 - (1 - 1 / 64) ** (k * n)) ** k))
    return rows


def filter_speed(n_msgs: int, rng: random.Random) -> tuple[float, float, int]:
    from lakeq.log import segments as seg

    vocab = [rand_tag(rng) for _ in range(200)]
    msgs = [seg.Message(id=str(i), body="x" * 200, tags=rng.sample(vocab, 3), properties={"n": i})
            for i in range(n_msgs)]
    s = seg.encode(msgs, 0)
    wanted = [vocab[0]]
    t0 = time.perf_counter()
    got = [m for _, m in seg.read(s, 0, n_msgs, wanted) if m is not None]
    t_bitmap = time.perf_counter() - t0
    # baseline: decode every header and check the exact tag list
    import zlib
    data = zlib.decompress(s.data) if s.compressed else s.data
    t0 = time.perf_counter()
    base = []
    for i in range(s.count):
        pos, hlen, blen, _ = seg.ENTRY.unpack_from(s.idx, i * seg.ENTRY.size)
        h = json.loads(data[pos:pos + hlen])
        if any(t in wanted for t in h["tags"]):
            h["body"] = data[pos + hlen:pos + hlen + blen].decode()
            base.append(h)
    t_base = time.perf_counter() - t0
    assert [m["id"] for m in got] == [m["id"] for m in base], "bitmap filter disagrees with the exact check"
    return t_bitmap, t_base, len(got)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer trials (under a minute)")
    args = ap.parse_args()
    rng = random.Random(7)
    trials = 10_000 if args.quick else 200_000
    print(f"# machine: {platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}")
    print(f"# false-positive rate of the index test, {trials} trials per cell (k = bits per tag; lakeq uses k={bitmap.K})")
    print(f"{'k':>2} {'tags/msg':>8} {'measured':>9} {'formula':>9}")
    for k, n, got, formula in fp_table(trials, rng):
        print(f"{k:>2} {n:>8} {got:>9.4%} {formula:>9.4%}")
    n = 20_000 if args.quick else 200_000
    tb, tbase, hits = filter_speed(n, rng)
    print(f"# filter {n} messages (3 tags each from 200) for one tag: {hits} delivered")
    print(f"bitmap index test + exact re-check: {tb * 1e9 / n:8.0f} ns/message")
    print(f"baseline (decode every header):     {tbase * 1e9 / n:8.0f} ns/message")
    print(f"ratio baseline/bitmap: {tbase / tb:.1f}x")


if __name__ == "__main__":
    main()
