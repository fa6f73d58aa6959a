"""A throwaway PostgreSQL server for the tests, from Debian's packages (postgresql-15): initdb in
a temporary folder, a server on a free loopback port with password authentication (SCRAM) for
TCP, stopped and removed when the session ends. As root, the server runs as the postgres user,
which Debian's package creates (PostgreSQL refuses to run as root)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SUPERUSER = "postgres"


@dataclass(frozen=True)
class Server:
    port: int
    password: str
    data: Path

    def url(self, database: str = "postgres", user: str = SUPERUSER, password: str | None = None) -> str:
        secret = self.password if password is None else password
        return f"postgresql://{user}:{secret}@127.0.0.1:{self.port}/{database}"

    def sql(self, *statements: str, database: str = "postgres") -> None:
        """Statements run as the superuser, each committed on its own (CREATE DATABASE needs that)."""
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as con:
            for statement in statements:
                con.execute(statement)

    def new_database(self, name: str) -> str:
        """A new empty database's URL, as the superuser."""
        self.sql(f'CREATE DATABASE "{name}"')
        return self.url(name)


def bindir() -> Path | None:
    """The newest installed server's programs, or None without one."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


def _as_owner(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", SUPERUSER, "--", *cmd] if os.geteuid() == 0 else cmd


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(root: Path) -> Server:
    programs = bindir()
    if programs is None:
        raise FileNotFoundError("no PostgreSQL server installed (Debian: apt-get install postgresql)")
    root.mkdir(parents=True, exist_ok=True)
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir(exist_ok=True)
    password = secrets.token_urlsafe(16)
    pwfile = root / "pwfile"
    pwfile.write_text(password + "\n")
    if os.geteuid() == 0:
        shutil.chown(root, SUPERUSER)
        for p in (sockets, pwfile):
            shutil.chown(p, SUPERUSER)
    subprocess.run(
        _as_owner(
            [str(programs / "initdb"), "-D", str(data), "-U", SUPERUSER, f"--pwfile={pwfile}"]
            + ["--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync", "-E", "UTF8", "--locale=C.UTF-8"]
        ),
        check=True,
        capture_output=True,
    )
    pwfile.unlink()
    port = _free_port()
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {sockets} -c fsync=off -c max_connections=200"
    subprocess.run(
        _as_owner([str(programs / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"]),
        check=True,
        capture_output=True,
    )
    return Server(port, password, data)


def stop(server: Server) -> None:
    programs = bindir()
    if programs is not None:
        subprocess.run(
            _as_owner([str(programs / "pg_ctl"), "-D", str(server.data), "-m", "immediate", "-w", "stop"]),
            capture_output=True,
        )


@contextlib.contextmanager
def throwaway(prefix: str = "bench-postgres-") -> Iterator[Server]:
    """A server for as long as the block runs, then stopped and its folder removed. The folder is
    not under root's temporary folders, which are root's alone (0700): the server's user must
    reach its data."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        server = start(root)
        try:
            yield server
        finally:
            stop(server)
    finally:
        shutil.rmtree(root, ignore_errors=True)
