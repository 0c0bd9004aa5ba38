"""What the fuzz tests share (test_native_fuzz, test_ops_fuzz, test_sqs_fuzz): hypothesis settings
whose example count ``LAKEQ_FUZZ_EXAMPLES`` overrides (derandomized unless it is set, so CI is
repeatable), and JSON values of any shape — null, booleans, huge ints, floats, odd strings, lists and
maps nested — whose map keys are mostly the names the route reads."""
from __future__ import annotations

import os
from collections.abc import Sequence

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st


def fuzz_settings(default_examples: int):
    return settings(max_examples=int(os.environ.get("LAKEQ_FUZZ_EXAMPLES", str(default_examples))), deadline=None,
                    suppress_health_check=list(HealthCheck), derandomize="LAKEQ_FUZZ_EXAMPLES" not in os.environ)


def odd_texts(samples: Sequence[str], max_size: int = 12):
    """Any short text, or one of ``samples`` (names and values the routes know, edge numbers)."""
    return st.one_of(st.text(max_size=max_size), st.sampled_from(list(samples)))


def wild_json(keys: Sequence[str], odd_text, nan: bool = False, max_leaves: int = 14, max_dict: int = 5):
    """Nested JSON-ish values; maps keyed by ``keys`` or ``odd_text``."""
    leaf = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                     st.floats(allow_nan=nan, allow_infinity=nan), odd_text)
    return st.recursive(leaf, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.sampled_from(list(keys)), odd_text), inner,
                                                     max_size=max_dict)), max_leaves=max_leaves)
