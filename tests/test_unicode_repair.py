"""`repair` checks a value in one pass before rebuilding it: the same answers as the
plain walk it replaced, for any nesting of strings with or without surrogates."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent.unicode import REPLACEMENT, repair, repair_text


def reference(value: Any) -> Any:
    """The walk `repair` was before its check: every string repaired, untouched parts kept."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        return value
    if isinstance(value, dict):
        items = [(reference(k), reference(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        repaired = [reference(item) for item in value]
        if all(new is old for new, old in zip(repaired, value, strict=True)):
            return value
        return repaired if isinstance(value, list) else tuple(repaired)
    return value


class Label(str):
    """A `str` subclass: repaired as a string, like any other."""


texts = st.one_of(
    st.text(max_size=8),
    st.text(alphabet=st.sampled_from("ab\ud800\udc00\ud83d\ude00\udce9é€\U0001f600"), max_size=6),
    st.builds(Label, st.text(alphabet="a\ud800", max_size=3)),
)
scalars = st.one_of(texts, st.integers(), st.floats(allow_nan=False), st.booleans(), st.none())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(texts, inner, max_size=4),
    ),
    max_leaves=20,
)


def same_shape(a: Any, b: Any) -> bool:
    """Equal, of the same types, and sharing exactly the same untouched objects."""
    if type(a) is not type(b) or a != b:
        return False
    if isinstance(a, dict):
        return all(same_shape(x, y) for x, y in zip(a.items(), b.items(), strict=True))
    if isinstance(a, list | tuple):
        return all(same_shape(x, y) for x, y in zip(a, b, strict=True))
    return True


def identities(value: Any) -> list[int]:
    """The ids of every container and string in `value`, in order."""
    found = [id(value)]
    if isinstance(value, dict):
        for k, v in value.items():
            found += identities(k) + identities(v)
    elif isinstance(value, list | tuple):
        for item in value:
            found += identities(item)
    return found


class TestRepair:
    @settings(max_examples=300, deadline=None)
    @given(value=values)
    def test_the_same_repair_as_the_plain_walk(self, value: Any) -> None:
        """Same result, same object when nothing needed repair, same untouched parts kept."""
        expected, got = reference(value), repair(value)
        assert same_shape(got, expected)
        kept = {ident: n for n, ident in enumerate(identities(value))}
        assert [kept.get(i, "new") for i in identities(got)] == [
            kept.get(i, "new") for i in identities(expected)
        ]
        assert (got is value) == (expected is value)

    @settings(max_examples=100, deadline=None)
    @given(value=values)
    def test_what_it_returns_encodes_and_needs_nothing_more(self, value: Any) -> None:
        """The result is valid UTF-8 wherever it holds text, and repairing it again is a no-op."""
        fixed = repair(value)
        assert repair(fixed) is fixed
        for part in identities_text(fixed):
            part.encode("utf-8")

    def test_texts(self) -> None:
        """A lone half becomes U+FFFD, a split pair is joined, valid text is itself."""
        assert repair_text("caf\udce9") == "caf" + REPLACEMENT
        assert repair_text("\ud83d\ude00") == "\U0001f600"
        plain = "plain é €"
        assert repair_text(plain) is plain
        block = {"type": "tool_use", "input": {"q": "x\ud800"}, "id": "t"}
        assert repair((block,)) == (
            {"type": "tool_use", "input": {"q": "x" + REPLACEMENT}, "id": "t"},
        )


def identities_text(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in identities_text(k) + identities_text(v)]
    if isinstance(value, list | tuple):
        return [t for item in value for t in identities_text(item)]
    return []
