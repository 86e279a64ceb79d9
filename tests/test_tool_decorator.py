"""The `@tool` decorator: schemas from signatures, descriptions from docstrings."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from typing import Annotated, Any, Literal, Optional

import jsonschema
import pydantic
import pytest
from typing_extensions import TypedDict

from statemachine_agent.tools import Tool, tool
from statemachine_agent.tools.base import DEFAULT_TOOL_TIMEOUT


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(TypedDict):
    x: int
    y: int


class Address(pydantic.BaseModel):
    street: str
    title: str = "home"


def schema_of(fn: Any) -> dict[str, Any]:
    built = tool(description="test tool")(fn)
    return dict(built.input_schema)


class TestSchemaTypes:
    def test_scalars(self) -> None:
        """str, int, float and bool map to their JSON Schema types, all required."""

        def f(s: str, i: int, x: float, b: bool) -> None: ...

        schema = schema_of(f)
        assert schema["type"] == "object"
        assert schema["properties"] == {
            "s": {"type": "string"},
            "i": {"type": "integer"},
            "x": {"type": "number"},
            "b": {"type": "boolean"},
        }
        assert schema["required"] == ["s", "i", "x", "b"]
        assert schema["additionalProperties"] is False

    def test_defaults_are_not_required(self) -> None:
        """Parameters with defaults are optional and show their default."""

        def f(q: str, limit: int = 10) -> None: ...

        schema = schema_of(f)
        assert schema["required"] == ["q"]
        assert schema["properties"]["limit"] == {"type": "integer", "default": 10}

    def test_no_parameters(self) -> None:
        """A function without parameters takes an empty object."""

        def f() -> None: ...

        schema = schema_of(f)
        assert schema["properties"] == {}
        assert "required" not in schema
        assert schema["additionalProperties"] is False

    def test_list_and_dict(self) -> None:
        """list[...] becomes an array of items; dict[str, ...] an object of values."""

        def f(tags: list[str], scores: dict[str, float]) -> None: ...

        props = schema_of(f)["properties"]
        assert props["tags"] == {"type": "array", "items": {"type": "string"}}
        assert props["scores"] == {"type": "object", "additionalProperties": {"type": "number"}}

    def test_literal(self) -> None:
        """Literal becomes an enum of its values."""

        def f(mode: Literal["fast", "slow"]) -> None: ...

        assert schema_of(f)["properties"]["mode"] == {"type": "string", "enum": ["fast", "slow"]}

    def test_enum(self) -> None:
        """An Enum becomes a $defs entry listing its values, without a title."""

        def f(color: Color) -> None: ...

        schema = schema_of(f)
        assert schema["properties"]["color"] == {"$ref": "#/$defs/Color"}
        assert schema["$defs"]["Color"] == {"type": "string", "enum": ["red", "blue"]}

    def test_optional_forms(self) -> None:
        """Optional[X] and X | None both accept null; without a default they stay required."""

        def f(a: Optional[int], b: str | None = None) -> None:  # noqa: UP045
            ...

        schema = schema_of(f)
        assert schema["properties"]["a"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
        assert schema["properties"]["b"] == {
            "anyOf": [{"type": "string"}, {"type": "null"}],
            "default": None,
        }
        assert schema["required"] == ["a"]

    def test_nested_typed_dict(self) -> None:
        """A TypedDict becomes a closed object definition with required keys."""

        def f(points: list[Point]) -> None: ...

        schema = schema_of(f)
        assert schema["properties"]["points"] == {
            "type": "array",
            "items": {"$ref": "#/$defs/Point"},
        }
        assert schema["$defs"]["Point"] == {
            "type": "object",
            "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
            "required": ["x", "y"],
            "additionalProperties": False,
        }

    def test_nested_model_keeps_property_named_title(self) -> None:
        """Title keywords are stripped, but a field that is called `title` survives."""

        def f(address: Address) -> None: ...

        definition = schema_of(f)["$defs"]["Address"]
        assert "title" not in definition
        assert definition["properties"] == {
            "street": {"type": "string"},
            "title": {"type": "string", "default": "home"},
        }
        assert definition["additionalProperties"] is False

    def test_default_values_are_left_untouched(self) -> None:
        """A default that happens to contain a `title` key is data and is kept as is."""

        def f(meta: dict[str, str] | None = None, opts: dict[str, Any] = {"title": "x"}) -> None:  # noqa: B006
            ...

        props = schema_of(f)["properties"]
        assert props["opts"]["default"] == {"title": "x"}
        assert "title" not in props["meta"]

    def test_any(self) -> None:
        """Any accepts every JSON value: an empty schema (plus its default)."""

        def f(value: Any = None) -> None: ...

        assert schema_of(f)["properties"]["value"] == {"default": None}

    def test_schema_is_valid_draft_2020_12(self) -> None:
        """The derived schema is itself valid, and validates a sample input."""

        def f(color: Color, where: Address, pts: list[Point], n: int | None = None) -> None: ...

        schema = schema_of(f)
        jsonschema.Draft202012Validator.check_schema(schema)
        sample = {"color": "red", "where": {"street": "Main"}, "pts": [{"x": 1, "y": 2}]}
        jsonschema.Draft202012Validator(schema).validate(sample)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.Draft202012Validator(schema).validate({**sample, "extra": 1})


class TestDescriptions:
    def test_google_style(self) -> None:
        """Google style: short + long description for the tool, Args for the parameters."""

        @tool
        def search(query: str, limit: int = 5) -> str:
            """Search the catalogue.

            Use it before answering product questions.

            Args:
                query: Words to look for.
                limit: How many hits to return.

            Returns:
                The hits, one per line.
            """
            return query

        assert search.description == (
            "Search the catalogue.\n\nUse it before answering product questions."
        )
        props = search.input_schema["properties"]
        assert props["query"]["description"] == "Words to look for."
        assert props["limit"]["description"] == "How many hits to return."

    def test_rest_style(self) -> None:
        """reST style `:param x:` lines describe parameters."""

        @tool
        def search(query: str) -> str:
            """Search the catalogue.

            :param query: Words to look for.
            """
            return query

        assert search.description == "Search the catalogue."
        assert search.input_schema["properties"]["query"]["description"] == "Words to look for."

    def test_numpy_style(self) -> None:
        """numpy style Parameters sections describe parameters."""

        @tool
        def search(query: str) -> str:
            """Search the catalogue.

            Parameters
            ----------
            query : str
                Words to look for.
            """
            return query

        assert search.description == "Search the catalogue."
        assert search.input_schema["properties"]["query"]["description"] == "Words to look for."

    def test_short_description_only(self) -> None:
        """A one-line docstring is the whole description."""

        @tool
        def ping() -> str:
            """Check the service is up."""
            return "pong"

        assert ping.description == "Check the service is up."

    def test_explicit_description_wins(self) -> None:
        """description=... replaces the docstring, whose params still describe arguments."""

        @tool(description="Custom text.")
        def f(x: int) -> int:
            """Docstring text.

            Args:
                x: The x.
            """
            return x

        assert f.description == "Custom text."
        assert f.input_schema["properties"]["x"]["description"] == "The x."

    def test_field_description_is_not_overridden(self) -> None:
        """A description given with pydantic Field beats the docstring's."""

        @tool
        def f(x: Annotated[int, pydantic.Field(description="From Field.")]) -> int:
            """Do it.

            Args:
                x: From docstring.
            """
            return x

        assert f.input_schema["properties"]["x"]["description"] == "From Field."


class TestDecoratorForms:
    def test_bare(self) -> None:
        """Bare @tool uses the function name and the default options."""

        @tool
        def lookup(key: str) -> str:
            """Look a key up."""
            return key.upper()

        assert isinstance(lookup, Tool)
        assert lookup.name == "lookup"
        assert lookup.timeout == DEFAULT_TOOL_TIMEOUT
        assert (lookup.sequential, lookup.ends_run) == (False, False)
        assert lookup(key="a") == "A"
        assert lookup("b") == "B"

    def test_with_arguments(self) -> None:
        """Every option given to @tool(...) ends up on the Tool."""

        @tool(
            name="db-write", description="Write a row.", timeout=5, sequential=True, ends_run=True
        )
        def write(row: str) -> str:
            return row

        assert write.name == "db-write"
        assert write.description == "Write a row."
        assert write.timeout == 5
        assert write.sequential is True
        assert write.ends_run is True

    def test_no_timeout(self) -> None:
        """timeout=None means the tool may run as long as it needs."""

        @tool(timeout=None)
        def f() -> None:
            """Do it."""

        assert f.timeout is None

    def test_async_function(self) -> None:
        """An async function stays async: calling the Tool returns a coroutine."""

        @tool
        async def fetch(url: str) -> str:
            """Fetch a page."""
            await asyncio.sleep(0)
            return f"got {url}"

        assert asyncio.iscoroutinefunction(fetch.handler)
        assert asyncio.run(fetch(url="x")) == "got x"
        assert fetch.input_schema["required"] == ["url"]

    def test_to_api(self) -> None:
        """The definition has exactly the API's three keys."""

        @tool
        def f(x: int) -> int:
            """Do it."""
            return x

        assert set(f.to_api()) == {"name", "description", "input_schema"}

    def test_handler_receives_annotated_types(self) -> None:
        """JSON input is converted to the annotated Enum and model types before the call."""
        seen: dict[str, Any] = {}

        @tool
        def paint(color: Color, where: Address) -> str:
            """Paint an address."""
            seen.update(color=color, where=where)
            return "ok"

        assert paint.handler(color="blue", where={"street": "Main"}) == "ok"
        assert seen["color"] is Color.BLUE
        assert seen["where"] == Address(street="Main")


class TestSetupErrors:
    def test_var_positional(self) -> None:
        """*args cannot be sent as JSON: TypeError at decoration."""
        with pytest.raises(TypeError, match=r"\*args"):

            @tool
            def f(*args: int) -> None:
                """Do it."""

    def test_var_keyword(self) -> None:
        """**kwargs cannot be described to the model: TypeError at decoration."""
        with pytest.raises(TypeError, match=r"\*\*kwargs"):

            @tool
            def f(**kwargs: int) -> None:
                """Do it."""

    def test_positional_only(self) -> None:
        """Positional-only parameters cannot be passed by keyword: TypeError."""
        with pytest.raises(TypeError, match="positional-only"):

            @tool
            def f(x: int, /) -> None:
                """Do it."""

    def test_missing_description(self) -> None:
        """No docstring and no description=...: TypeError naming the tool."""
        with pytest.raises(TypeError, match="'f' has no description"):

            @tool
            def f(x: int) -> None:
                pass

    def test_missing_annotation(self) -> None:
        """An unannotated parameter would be an untyped schema: TypeError."""
        with pytest.raises(TypeError, match="no type hint"):

            @tool
            def f(x) -> None:  # type: ignore[no-untyped-def]
                """Do it."""

    def test_unschemable_type(self) -> None:
        """A type pydantic cannot describe fails at decoration, naming the tool."""
        with pytest.raises(TypeError, match="Cannot derive an input schema for tool 'f'"):

            @tool
            def f(x: Callable[[], int]) -> None:
                """Do it."""

    def test_invalid_name(self) -> None:
        """A name the API would refuse is rejected up front."""
        with pytest.raises(ValueError, match="Invalid tool name"):
            tool(name="has space", description="x")(lambda: None)

    def test_lambda_needs_a_name(self) -> None:
        """A lambda's name '<lambda>' is not a valid tool name."""
        with pytest.raises(ValueError, match="<lambda>"):
            tool(description="x")(lambda: None)

    def test_invalid_timeout(self) -> None:
        """A non-positive timeout is a setup error."""
        with pytest.raises(ValueError, match="timeout"):
            tool(name="x", timeout=0, description="x")(lambda: None)

    def test_double_decoration(self) -> None:
        """Decorating a Tool again is a mistake, reported as such."""

        @tool
        def f() -> None:
            """Do it."""

        with pytest.raises(TypeError, match="already a Tool"):
            tool(f)
