"""Pure rules of issue 16 item 3: runs of folded locks (selection.may_fold) and the first page of a
log read (selection.segments_wanted)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lakeq.log import selection
from lakeq.log.selection import SEGMENTS_PAGE, may_fold, segments_wanted


def test_runs_of_folded_locks_are_bounded(monkeypatch):
    assert [may_fold(r) for r in range(selection.FOLD_RUN + 2)] == [True] * selection.FOLD_RUN + [False] * 2
    monkeypatch.setattr(selection, "FOLD_RUN", 0)  # folding off: every pull ranks
    assert not may_fold(0)
    assert may_fold(2, fold_run=3) and not may_fold(3, fold_run=3)


@given(st.integers(0, 1000), st.one_of(st.none(), st.integers(-1, 500)))
def test_first_page_covers_the_batch_with_the_fewest_segments(offsets, per):
    n = segments_wanted(offsets, per)
    assert 1 <= n <= SEGMENTS_PAGE
    if per is None or per < 1:
        assert n == SEGMENTS_PAGE  # nothing known: as before
    else:
        assert n * per >= offsets or n == SEGMENTS_PAGE  # enough segments of that size (up to a page)
        assert n == 1 or (n - 1) * per < offsets  # and no more than needed
