"""The PostgreSQL server the store tests use, and a fresh schema per test.

The server is ``$WAITBOUND_TEST_PG_DSN`` (default: trust auth on 127.0.0.1:5432,
database ``test``). When it cannot be reached, PostgreSQL tests are skipped on a
developer's machine and FAIL when ``$CI`` is set, so CI never passes by skipping them.
Every test gets its own schema with a random name, dropped afterwards, so pytest-xdist
workers never see each other's rows.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import pytest

DSN = os.environ.get("WAITBOUND_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def unreachable(dsn: str) -> str | None:
    """Why the server at *dsn* cannot be used, or ``None`` when it can."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]')"
    from waitbound.stores.postgres import redact_dsn

    try:
        psycopg.connect(dsn, connect_timeout=3).close()
    except psycopg.Error as exc:
        why = " ".join(str(exc).split())
        return f"PostgreSQL at {redact_dsn(dsn)} cannot be reached ({why})"
    return None


def require(dsn: str, *, checked: str | None) -> str:
    """*dsn*, or skip the test (fail it under ``$CI``) when *checked* gives a reason."""
    if checked is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{checked}; set WAITBOUND_TEST_PG_DSN", pytrace=False)
        pytest.skip(f"{checked}; set WAITBOUND_TEST_PG_DSN to run the PostgreSQL tests")
    return dsn


@functools.cache
def _checked_default() -> str | None:
    return unreachable(DSN)


def require_postgres() -> str:
    """The test server's DSN (see :func:`require`)."""
    return require(DSN, checked=_checked_default())


def new_schema_name() -> str:
    """A schema name no other test (or xdist worker) uses."""
    return f"wbtest_{uuid.uuid4().hex[:20]}"


def execute(statement: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
    """Run one statement on the test server (autocommit), as an outside tool would."""
    import psycopg

    with psycopg.connect(require_postgres(), autocommit=True) as conn:
        cursor = conn.execute(statement.encode(), params)  # bytes: a test's own SQL text
        return list(cursor.fetchall()) if cursor.description else []


def drop_schema(name: str) -> None:
    """Drop *name* and everything in it (nothing happens when it is absent)."""
    execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def schema_exists(name: str) -> bool:
    """Whether the schema *name* exists on the test server."""
    return bool(execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,)))


@contextmanager
def fresh_database() -> Iterator[str]:
    """The DSN of a new database on the test server, migrated; dropped afterwards."""
    import psycopg

    from waitbound.stores import upgrade_store

    base = require_postgres()
    name = f"wbtest_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"'.encode())
    dsn = urlunsplit(urlsplit(base)._replace(path=f"/{name}"))
    try:
        upgrade_store(dsn)
        yield dsn
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


@contextmanager
def fresh_schema(*, upgraded: bool = True) -> Iterator[str]:
    """A new schema name (created and upgraded when *upgraded*), dropped afterwards."""
    dsn = require_postgres()
    name = new_schema_name()
    try:
        if upgraded:
            from waitbound.stores.postgres import SCHEMA_VERSION, upgrade

            assert upgrade(dsn, schema=name) == list(range(1, SCHEMA_VERSION + 1))
        yield name
    finally:
        drop_schema(name)
