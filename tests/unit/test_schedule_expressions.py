"""infra.local.schedules: rate() / cron() expressions as EventBridge and Glue read them (UTC)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infra.local import schedules as S

UTC = timezone.utc


def at(*a) -> datetime:
    return datetime(*a, tzinfo=UTC)


def test_rate_counts_from_its_origin():
    r = S.parse("rate(5 minutes)")
    assert r.period_s == 300
    r = S.Rate(r.text, r.period_s, at(2026, 11, 23, 12, 0, 30))
    assert r.next_after(at(2026, 11, 23, 12, 0, 30)) == at(2026, 11, 23, 12, 5, 30)
    assert r.next_after(at(2026, 11, 23, 12, 5, 30)) == at(2026, 11, 23, 12, 10, 30)
    assert S.parse("rate(1 minute)").period_s == 60
    assert S.parse("rate(2 hours)").period_s == 7200
    assert S.parse("rate(1 day)").period_s == 86400


@pytest.mark.parametrize("expr, after, expected", [
    ("cron(5 * * * ? *)", at(2026, 11, 23, 12, 7), at(2026, 11, 23, 13, 5)),
    ("cron(5 * * * ? *)", at(2026, 11, 23, 12, 4, 59), at(2026, 11, 23, 12, 5)),
    ("cron(5 * * * ? *)", at(2026, 11, 23, 12, 5), at(2026, 11, 23, 13, 5)),  # strictly after
    ("cron(20 * * * ? *)", at(2026, 12, 31, 23, 30), at(2027, 1, 1, 0, 20)),
    ("cron(0/15 * * * ? *)", at(2026, 11, 23, 12, 7), at(2026, 11, 23, 12, 15)),
    ("cron(0 9 ? * MON-FRI *)", at(2026, 11, 21, 12, 0), at(2026, 11, 23, 9, 0)),  # Sat → Mon
    ("cron(0 9 ? * 1 *)", at(2026, 11, 23, 12, 0), at(2026, 11, 29, 9, 0)),  # 1 = Sunday
    ("cron(0 0 1 JAN,JUL ? *)", at(2026, 2, 1), at(2026, 7, 1)),
    ("cron(30 2 29 2 ? *)", at(2026, 3, 1), at(2028, 2, 29, 2, 30)),
    ("cron(0 12 * * ? 2027)", at(2026, 6, 1), at(2027, 1, 1, 12, 0)),
])
def test_cron_next(expr, after, expected):
    assert S.parse(expr).next_after(after) == expected


@pytest.mark.parametrize("bad", [
    "rate(0 minutes)", "rate(1 minutes)", "rate(5 minute)", "rate(5 weeks)", "every 5 minutes",
    "cron(5 * * * *)", "cron(* * * * * *)", "cron(0 9 ? * ? *)", "cron(0 9 L * ? *)",
    "cron(0 9 ? * 2#1 *)", "cron(60 * * * ? *)", "cron(0 24 * * ? *)", "cron(0 0 ? * FOO *)",
])
def test_refused_expressions(bad):
    with pytest.raises(ValueError):
        S.parse(bad)


def _reference_next(minutes, hours, t: datetime) -> datetime:
    """Minute by minute: the first minute after ``t`` whose minute and hour match."""
    c = t.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while not (c.minute in minutes and c.hour in hours):
        c += timedelta(minutes=1)
    return c


@settings(max_examples=60, deadline=None)
@given(minutes=st.sets(st.integers(0, 59), min_size=1, max_size=4),
       hours=st.sets(st.integers(0, 23), min_size=1, max_size=3),
       start=st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2030, 1, 1)))
def test_cron_matches_a_minute_by_minute_reference(minutes, hours, start):
    expr = S.parse(f"cron({','.join(map(str, sorted(minutes)))} {','.join(map(str, sorted(hours)))} * * ? *)")
    t = start.replace(tzinfo=UTC)
    assert expr.next_after(t) == _reference_next(minutes, hours, t)
