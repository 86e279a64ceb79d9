"""A password in a `--store` URL is never printed, whatever goes wrong with the store.

psycopg quotes a malformed connection string whole in its error, password included;
every error line of the CLI and of `PostgresCheckpointer` masks it. The servers these
URLs name are on 127.0.0.1 port 1, where nothing listens.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statemachine_agent.cli import main
from statemachine_agent.persistence import PostgresCheckpointer
from statemachine_agent.persistence.postgres import masked

PASSWORD = "S3cret-Pass_w0rd"

URLS = [
    f"postgresql://user:{PASSWORD}@127.0.0.1:1/db",
    f"postgres://user:{PASSWORD}@127.0.0.1:1/db",
    f"POSTGRESQL://user:{PASSWORD}@127.0.0.1:1/db",
    f"postgresql://user:{PASSWORD}@127.0.0.1:notaport/db",
    f"postgresql://user:{PASSWORD}@[bad/db",
    f"postgresql://user:{PASSWORD}@127.0.0.1:1/db?sslmode=nonsense",
    f"host=127.0.0.1 port=1 password={PASSWORD} x",
    f"host=127.0.0.1 port=1 password='{PASSWORD}' dbname",
]


class TestCli:
    @pytest.mark.parametrize("url", URLS)
    @pytest.mark.parametrize("command", [["runs"], ["prune", "--older-than", "1d"]])
    def test_the_password_is_never_printed(
        self, url: str, command: list[str], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Every failure to open the store is one line, exit 2, without the password."""
        assert main([*command, "--store", url]) == 2
        captured = capsys.readouterr()
        assert PASSWORD not in captured.out + captured.err
        assert len(captured.err.strip().splitlines()) == 1
        assert "cannot open store" in captured.err or "no store at" in captured.err


class TestCheckpointer:
    @pytest.mark.parametrize("url", URLS)
    def test_connection_errors_do_not_quote_the_password(self, url: str) -> None:
        """The error `PostgresCheckpointer` raises, and its chain, hold no password."""
        with pytest.raises(Exception) as caught:  # noqa: PT011 - psycopg's own classes
            PostgresCheckpointer(url)
        seen = [caught.value, caught.value.__cause__, caught.value.__context__]
        assert all(PASSWORD not in str(e) for e in seen if e is not None)
        assert type(caught.value).__module__.startswith("psycopg")


class TestMasked:
    @given(
        user=st.from_regex(r"[a-z]{1,8}", fullmatch=True),
        password=st.text(
            st.characters(blacklist_categories=["Cs", "Cc", "Zs"], blacklist_characters="@/"),
            min_size=4,
            max_size=30,
        ),
    )
    def test_any_password_is_masked_in_any_message(self, user: str, password: str) -> None:
        """Whatever the password, a message quoting the URL or the password says `***`."""
        url = f"postgresql://{user}:{password}@127.0.0.1:1/db"
        message = f'invalid connection option in "{url}": near {password}'
        assert password not in masked(message, url)
        assert f"{user}:***@127.0.0.1" in masked(message, url)
