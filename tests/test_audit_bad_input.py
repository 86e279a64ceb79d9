"""Bad input to the audit tools: any malformed file is one error line naming the line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine_agent import Agent, Audit, ScriptedModel, calculate
from statemachine_agent.cli import main
from statemachine_agent.testing import replies

COMMANDS = ("report", "inspect", "replay")


@pytest.fixture(scope="module")
def lines(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    """The lines of a real audit file: a tool round trip, then an answer."""
    folder = tmp_path_factory.mktemp("audit")
    script = [replies.tool_use("calculate", {"expression": "6*7"}), replies.text("42")]
    result = Agent(ScriptedModel(script), tools=[calculate], audit=Audit(dir=folder)).run("6x7?")
    assert result.audit_path is not None
    return result.audit_path.read_bytes().splitlines(keepends=True)


def run(command: str, path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    argv = [command, str(path)]
    if command == "report":
        argv += ["-o", str(path.with_suffix(".html"))]
    code = main(argv)
    return code, capsys.readouterr().err


def assert_one_line(err: str) -> None:
    assert err.startswith("statemachine-agent: error: "), err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def damaged(draw: st.DrawFn, lines: list[bytes]) -> tuple[list[bytes], int, str]:
    """The file with one line damaged in one of the ways files get damaged; its number
    and the kind of damage."""
    index = draw(st.integers(0, len(lines) - 1))
    event = json.loads(lines[index])
    kind = draw(st.sampled_from(["drop", "retype", "deep", "binary", "utf8", "cut"]))
    if kind == "drop":
        key = draw(st.sampled_from(sorted(event)))
        del event[key]
        line = json.dumps(event).encode() + b"\n"
    elif kind == "retype":
        key = draw(st.sampled_from(sorted(event)))
        event[key] = draw(JSON)
        line = json.dumps(event).encode() + b"\n"
    elif kind == "deep":
        depth = draw(st.sampled_from([200, 5000, 100_000]))
        kind = "deep" if depth > 1000 else "nested"
        event[draw(st.sampled_from(sorted(event)))] = json.loads("[" * 200 + "]" * 200)
        line = (json.dumps(event)[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}\n").encode()
    elif kind == "binary":
        line = b"\x00" + draw(st.binary(min_size=0, max_size=40)) + b"\n"
    elif kind == "utf8":
        raw = lines[index]
        at = draw(st.integers(0, len(raw) - 1))
        line = raw[:at] + b"\xff\xfe" + raw[at:]
    else:
        raw = lines[index]
        line = raw[: draw(st.integers(1, len(raw) - 3))] + b"\n"  # never the whole object
    return [*lines[:index], line, *lines[index + 1 :]], index + 1, kind


UNREADABLE = frozenset({"deep", "binary", "utf8", "cut"})
"""Damage that leaves a line no JSON reader can take: every command must refuse it by number."""


class TestFuzz:
    @settings(max_examples=75, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def test_any_damage_is_one_line_or_a_result(
        self,
        data: st.DataObject,
        lines: list[bytes],
        tmp_path_factory: pytest.TempPathFactory,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """Whatever the damage, each command ends normally or with one error line, exit 2;
        a line that cannot be read at all is always refused, by its number."""
        content, number, kind = data.draw(damaged(lines))
        path = tmp_path_factory.mktemp("fuzz") / "run.jsonl"
        path.write_bytes(b"".join(content))
        for command in COMMANDS:
            code, err = run(command, path, capsys)
            if kind in UNREADABLE:
                assert code == 2, (command, kind, err)
                assert f"{path}:{number}:" in err, (command, kind, err)
            if code == 2:
                assert_one_line(err)
                assert re.search(rf"{re.escape(str(path))}(:\d+)?: ", err), (command, err)
            else:
                assert code in (0, 1), (command, code, err)


class TestNamedLines:
    @pytest.mark.parametrize("command", COMMANDS)
    @pytest.mark.parametrize(
        "damage",
        ["missing field", "deep nesting", "binary bytes", "invalid utf-8"],
    )
    def test_the_damaged_line_is_named(
        self,
        lines: list[bytes],
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        command: str,
        damage: str,
    ) -> None:
        """The error line names the number of the damaged line."""
        index = next(i for i, raw in enumerate(lines) if b'"transition.fired"' in raw)
        event: dict[str, Any] = json.loads(lines[index])
        if damage == "missing field":
            del event["source"]
            line = json.dumps(event).encode() + b"\n"
        elif damage == "deep nesting":
            line = b'{"event": "transition.fired", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
        elif damage == "binary bytes":
            line = b"\x00\x01\x02\x89PNG\x1a\n"
        else:
            line = lines[index][:10] + b"\xc3\x28" + lines[index][10:]
        path = tmp_path / "run.jsonl"
        path.write_bytes(b"".join([*lines[:index], line, *lines[index + 1 :]]))
        code, err = run(command, path, capsys)
        # A transition without its source is named by every reader, inspect included
        # (it used to draw the row blank).
        assert code == 2
        assert_one_line(err)
        assert f"{path}:{index + 1}:" in err
