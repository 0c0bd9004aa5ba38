"""The Glue jobs' roles in template.yaml (CompactJobRole, ReplaySelectJobRole) evaluated as IAM
would (infra.local.aws_rules.evaluate, intrinsics resolved): each job may list and read the
prefixes it uses and not the rest of the lake bucket."""
from __future__ import annotations

import pytest

from infra.local import aws_rules as ar
from infra.local import template as T

BUCKET = "arn:aws:s3:::lake"


@pytest.fixture(scope="module")
def statements():
    ctx = T.Context(template=T.load_template(), attributes={("LakeBucket", "Arn"): BUCKET})
    out = {}
    for role in ("CompactJobRole", "ReplaySelectJobRole"):
        props = T.resolve(ctx.resources[role]["Properties"], ctx)
        out[role] = [st for p in props["Policies"] for st in p["PolicyDocument"]["Statement"]]
    return out


def lists(statements, prefix: str | None) -> bool:
    cond = () if prefix is None else (("s3:prefix", prefix),)
    return ar.evaluate(statements, ar.Permission("s3:ListBucket", BUCKET, cond)) == "allow"


def reads(statements, key: str) -> bool:
    return ar.evaluate(statements, ar.Permission("s3:GetObject", f"{BUCKET}/{key}")) == "allow"


def test_the_compaction_lists_raw_and_lake_only(statements):
    st = statements["CompactJobRole"]
    for prefix in ("raw/kind=messages/", "lake/_manifests/kind=offsets/", "lake/_symlinks/kind=bodies/",
                   "lake/kind=members/run=1-a/"):
        assert lists(st, prefix), prefix
    for prefix in (None, "", "bodies/", "replays/", "reports/backlog/"):
        assert not lists(st, prefix), prefix


def test_the_replay_selection_reads_messages_and_bodies_only(statements):
    st = statements["ReplaySelectJobRole"]
    for kind in ("messages", "bodies"):
        for key in (f"raw/kind={kind}/dt=2026-01-01/hour=00/x.jsonl.gz",
                    f"lake/kind={kind}/run=1-a/dt=2026-01-01/hour=00/part-0.parquet",
                    f"lake/_manifests/kind={kind}/dt=2026-01-01/hour=00/gen=0000000001.json"):
            assert reads(st, key), key
        for prefix in (f"raw/kind={kind}/", f"raw/kind={kind}", f"lake/_manifests/kind={kind}/",
                       f"lake/kind={kind}/run=1-a/dt=2026-01-01/hour=00/"):
            assert lists(st, prefix), prefix
    assert lists(st, "replays/rp_1/manifest/")
    for key in ("raw/kind=offsets/dt=2026-01-01/hour=00/x.jsonl.gz",
                "lake/kind=members/run=1-a/dt=2026-01-01/hour=00/part-0.parquet",
                "lake/_symlinks/kind=messages/dt=2026-01-01/hour=00/symlink.txt", "bodies/t/x", "reports/x"):
        assert not reads(st, key), key
    for prefix in (None, "", "raw/", "lake/", "raw/kind=offsets/", "lake/_manifests/kind=members/", "bodies/"):
        assert not lists(st, prefix), prefix
