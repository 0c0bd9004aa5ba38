"""The subscription matcher's reference (API.md's condition language, evaluated linearly over every
subscription) that the index's property tests compare with (test_matcher_dense,
test_matcher_distractors, test_matcher_blocks), and the check of an index's answer (a list, no id
twice)."""
from __future__ import annotations

from matcher import SubscriptionIndex


def _num(v) -> bool:
    return type(v) in (int, float)


def _eq(a, b) -> bool:
    """JSON equality: "1" is not 1, true is not 1, 1 is 1.0."""
    if type(a) is bool or type(b) is bool:
        return type(a) is bool and type(b) is bool and a == b
    if type(a) is str or type(b) is str:
        return type(a) is str and type(b) is str and a == b
    return _num(a) and _num(b) and a == b


def _level(level: dict, props: dict) -> bool:
    f = level["field"]
    if "exists" in level:
        return (f in props) is level["exists"]
    if f not in props:  # a level on a field the message lacks does not match
        return False
    v = props[f]
    if "values" in level:
        return any(_eq(v, x) for x in level["values"])
    if "anything_but" in level:
        return not any(_eq(v, x) for x in level["anything_but"])
    if "range" in level:
        return _num(v) and level["range"][0] <= v <= level["range"][1]
    return type(v) is str and v.startswith(level["prefix"])


def reference(subs: dict, topic: str, props: dict, tags) -> set:
    return {sid for sid, (t, levels, sub_tags) in subs.items()
            if (topic == t or topic.startswith(t + "/"))
            and all(_level(lv, props) for lv in levels)
            and (not sub_tags or any(x in tags for x in sub_tags))}


def answer(idx: SubscriptionIndex, topic: str, props: dict, tags) -> set:
    got = idx.match(topic, props, tags)
    assert isinstance(got, list)
    assert len(got) == len(set(got)), "an id matched twice"
    return set(got)
