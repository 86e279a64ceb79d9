"""Packed checkpoint rows: deflated against a frozen dictionary, and always read back exactly."""

from __future__ import annotations

import contextlib
import hashlib
import json
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent.persistence.base import encode
from statemachine_agent.persistence.packing import (
    DICTIONARIES,
    WRITES_WITH,
    UnpackError,
    pack,
    unpack,
)
from statemachine_agent.unicode import repair_text

PINNED = {1: "8a2cf9732d12117b724b163be83050b2b816344b0fb113f7ffecb3abe90ffec9"}
"""Each released dictionary's digest. Rows packed with one must stay readable, so a
dictionary never changes: a better one is added under the next number."""

TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=400)
"""Any text a body can be (bodies are repaired of lone surrogates before they are packed)."""


class TestPacking:
    def test_released_dictionaries_never_change(self) -> None:
        assert {n: hashlib.sha256(d).hexdigest() for n, d in DICTIONARIES.items()} == PINNED
        assert WRITES_WITH in DICTIONARIES

    @given(text=TEXT)
    def test_any_text_comes_back_exactly(self, text: str) -> None:
        packed = pack(text)
        assert packed[0] == WRITES_WITH
        assert unpack(packed) == text

    @settings(max_examples=30)
    @given(
        text=st.builds(
            # Long bodies from a little drawn data: a drawn run repeated past the 8 KiB
            # window (drawing 20,000 characters one by one trips hypothesis's size check).
            lambda run, extra: (run * (9_000 // len(run) + extra))[:20_000],
            st.text(st.sampled_from('ab{}":,é€'), min_size=1, max_size=400),
            st.integers(min_value=1, max_value=40),
        ),
        earlier=st.booleans(),
    )
    def test_bodies_longer_than_the_write_window_and_rows_written_earlier_read_back(
        self, text: str, earlier: bool
    ) -> None:
        """Rows are written with an 8 KiB window; a longer body, and a row written by an
        earlier version (32 KiB window, default memory level), inflate exactly."""
        packed = pack(text)
        if earlier:
            deflate = zlib.compressobj(6, zlib.DEFLATED, -15, zdict=DICTIONARIES[WRITES_WITH])
            data = text.encode("utf-8")
            packed = bytes((WRITES_WITH,)) + deflate.compress(data) + deflate.flush()
        assert unpack(packed) == text

    @given(text=TEXT, cut=st.integers(min_value=1, max_value=40))
    def test_a_cut_row_is_an_unpack_error(self, text: str, cut: int) -> None:
        """Packed bytes cut short never come back as text (the end of the stream is gone)."""
        packed = pack(text)
        with pytest.raises(UnpackError):
            unpack(packed[: max(1, len(packed) - cut)])

    @given(junk=st.binary(max_size=64))
    def test_junk_is_an_unpack_error_or_text(self, junk: bytes) -> None:
        """Arbitrary bytes give text or `UnpackError`, never a raw zlib or Unicode error
        (the store's digest chain is what tells a forged row from a real one)."""
        with contextlib.suppress(UnpackError):
            assert isinstance(unpack(junk), str)

    def test_a_row_of_a_dictionary_this_version_lacks_says_so(self) -> None:
        with pytest.raises(UnpackError, match="dictionary 200, which this version lacks"):
            unpack(bytes((200,)) + pack("{}")[1:])


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
"""Any body a store may be handed (lone surrogates and non-finite numbers included)."""


class TestStoredBytes:
    """The write path's shortcuts store exactly the bytes of the plain way (the format is a
    contract: a digest chains over them)."""

    @given(text=TEXT)
    def test_a_row_packs_as_with_a_compressor_primed_for_it(self, text: str) -> None:
        deflate = zlib.compressobj(6, zlib.DEFLATED, -13, 4, zdict=DICTIONARIES[WRITES_WITH])
        reference = bytes((WRITES_WITH,)) + deflate.compress(text.encode()) + deflate.flush()
        assert pack(text) == reference

    @given(body=st.dictionaries(st.text(), JSON, max_size=6))
    def test_a_body_encodes_as_json_dumps_does(self, body: dict[str, object]) -> None:
        reference = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        assert encode(body) == repair_text(reference)
