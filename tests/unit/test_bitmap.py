"""Multi-tag bitmap (SPEC §2): never drops a true match; exact re-check removes false positives."""
from hypothesis import given
from hypothesis import strategies as st

from matcher import bitmap

tag = st.text(min_size=1, max_size=12)


@given(tags=st.lists(tag, max_size=16), wanted=st.lists(tag, min_size=1, max_size=4))
def test_index_test_never_drops_a_true_match(tags, wanted):
    b = bitmap.tags_bitmap(tags)
    if any(t in tags for t in wanted):
        assert bitmap.may_match_any(b, wanted)
    # the exact check is exactly the reference any-of
    assert bitmap.matches_any(tags, wanted) == any(t in set(wanted) for t in tags)


@given(t=tag)
def test_hash_has_at_most_k_bits_and_is_stable(t):
    h = bitmap.tag_hash(t)
    assert 1 <= bin(h).count("1") <= bitmap.K
    assert h < 2**64
    assert bitmap.tag_hash(t) == h


def test_known_values_are_stable_across_processes():
    # blake2b-derived, so the stored bitmaps stay valid across deployments
    assert bitmap.tag_hash("A") == bitmap.tag_hash("A", bitmap.K)
    assert bitmap.tags_bitmap([]) == 0
    assert not bitmap.may_match_any(0, ["A"])
