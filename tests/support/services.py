"""Real services a test starts for itself: a throwaway PostgreSQL server per session
(tests/postgres.py), a history on each backend, and Debian's chromium, headless (tests/browser.py)."""

from __future__ import annotations

import uuid

import pytest

from support.process import bench, unavailable

# --------------------------------------------------------------------------- PostgreSQL


@pytest.fixture(scope="session")
def postgres():
    """A throwaway PostgreSQL server (tests/postgres.py) for this worker's session. Without one
    installed the tests that need it skip, except under CI=true, where they fail (.ci/run
    installs Debian's package)."""
    import postgres as pg

    if pg.bindir() is None:
        unavailable("the PostgreSQL tests", "no PostgreSQL server installed (Debian: apt-get install postgresql)")
    with pg.throwaway() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def history_at(request, tmp_path):
    """Where a test's history lives, once for each backend: an SQLite file's path, or the URL of
    a new database on the session's PostgreSQL server (its tables made by `history migrate`)."""
    if request.param == "sqlite":
        return str(tmp_path / "history.sqlite")
    server = request.getfixturevalue("postgres")
    url = server.new_database(f"t{uuid.uuid4().hex[:12]}")
    bench("history", "migrate", "--db", url)
    return url


# --------------------------------------------------------------------------- a real browser


@pytest.fixture
def browser():
    """Debian's chromium, headless, one tab (tests/browser.py), for one test. Without it the
    tests that need it skip, except under CI=true, where they fail (.ci/run installs it)."""
    import browser as chromium

    if chromium.program() is None:
        unavailable("the browser tests", "no chromium on PATH (Debian: apt-get install chromium)")
    with chromium.Browser() as b:
        yield b
