"""Stores, the peers' virtualenv and the machine, for bench/compare.py.

A store is where one run's jobs live, fresh per run and removed after it (also after an
error): a SQLite file in a temporary folder, a PostgreSQL DATABASE ``cmp_<random>`` made
for the run (so ``pg_stat_activity.datname`` names exactly the run's backends), or a Redis
database number flushed before and after.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import secrets
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent
REQUIREMENTS = REPO / "bench" / "peers" / "requirements.txt"


# ---- PostgreSQL ---------------------------------------------------------------
def pg_connect(url: str):  # type: ignore[no-untyped-def]
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=5)


def pg_with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}", query=""))


@contextlib.contextmanager
def pg_database(admin_url: str, prefix: str) -> Iterator[str]:
    """A fresh database for one run, dropped (WITH FORCE) on exit."""
    name = f"{prefix}{secrets.token_hex(4)}"
    with pg_connect(admin_url) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield pg_with_database(admin_url, name)
    finally:
        with pg_connect(admin_url) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def pg_backends(admin_url: str, database: str) -> list[int]:
    """Pids of the server backends connected to ``database`` (the run's own)."""
    with pg_connect(admin_url) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,)
        ).fetchall()
    return [int(r[0]) for r in rows]


def pg_info(admin_url: str) -> str:
    names = ("synchronous_commit", "fsync", "shared_buffers", "max_connections")
    with pg_connect(admin_url) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        values = [f"{n}={conn.execute(f'SHOW {n}').fetchone()[0]}" for n in names]  # type: ignore[index]
    return f"PostgreSQL {version.split()[0]}, " + ", ".join(values)


# ---- Redis (a few RESP commands over a socket: the project has no Redis client) ------
def redis_call(url: str, *command: str) -> str:
    """Send ``SELECT db`` then one command; the reply's text."""
    parts = urlsplit(url)
    db = (parts.path or "/0").strip("/") or "0"
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), 5) as s:
        for cmd in (("SELECT", db), command):
            s.sendall(encode_resp(cmd))
            reply = read_resp(s.makefile("rb"))
    return reply


def encode_resp(cmd: tuple[str, ...]) -> bytes:
    out = [f"*{len(cmd)}\r\n".encode()]
    for arg in cmd:
        data = arg.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def read_resp(f) -> str:  # type: ignore[no-untyped-def]
    line = f.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:]
    if kind == b"-":
        raise RuntimeError(f"redis: {rest.decode()}")
    if kind == b"$":
        size = int(rest)
        return "" if size < 0 else f.read(size + 2)[:-2].decode()
    return rest.decode()


def redis_info(url: str) -> dict[str, str]:
    text = redis_call(url, "INFO", "server")
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {k: v for k, v in pairs}


@contextlib.contextmanager
def redis_database(url: str) -> Iterator[str]:
    redis_call(url, "FLUSHDB")
    try:
        yield url
    finally:
        redis_call(url, "FLUSHDB")


# ---- SQLite ---------------------------------------------------------------------
@contextlib.contextmanager
def sqlite_file() -> Iterator[str]:
    folder = tempfile.mkdtemp(prefix="compare-store-")
    try:
        yield os.path.join(folder, "store.db")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---- the peers' virtualenv -----------------------------------------------------------
def requirements_stamp() -> str:
    data = REQUIREMENTS.read_bytes() + sys.version.encode()
    return hashlib.sha256(data).hexdigest()


def peers_venv(path: Path, *, create: bool, log: Path) -> tuple[str | None, str]:
    """The peers' python, made (or refreshed) from requirements.txt when ``create``.

    Returns (python or None, a note: what was done or why it failed). A whole-file install
    that fails is retried one requirement at a time, so one peer's failure skips only it.
    """
    python = path / "bin" / "python"
    if not create:
        return (
            (str(python), f"given: {path}") if python.exists() else (None, f"{path}: no bin/python")
        )
    if not REQUIREMENTS.exists():
        return None, "bench/peers/requirements.txt is missing"
    stamp_file = path / ".requirements-stamp"
    stamp = requirements_stamp()
    if python.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return str(python), f"re-used {path} (requirements unchanged)"
    shutil.rmtree(path, ignore_errors=True)
    with open(log, "ab") as out:
        made = subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(path)], stdout=out, stderr=out
        )
        if made.returncode != 0:
            return None, f"python -m venv failed (log {log})"
        subprocess.run(
            [str(python), "-m", "ensurepip", "--upgrade", "--default-pip"], stdout=out, stderr=out
        )
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        whole = subprocess.run([*pip, "-r", str(REQUIREMENTS)], stdout=out, stderr=out)
        failed: list[str] = []
        if whole.returncode != 0:
            for line in REQUIREMENTS.read_text().splitlines():
                req = line.split("#", 1)[0].strip()
                if req and subprocess.run([*pip, req], stdout=out, stderr=out).returncode:
                    failed.append(req)
    if whole.returncode == 0:
        stamp_file.write_text(stamp)
        return str(python), f"created {path} from bench/peers/requirements.txt"
    return str(python), f"created {path}; failed to install: {', '.join(failed) or '?'} (log {log})"


# ---- the machine ------------------------------------------------------------------
def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
    return done.stdout.strip()


def machine(pg_url: str | None, redis_url: str | None) -> dict[str, str]:
    info = {
        "nproc": str(os.cpu_count()),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "kernel": f"{platform.system()} {platform.release()}",
        "commit": (git("rev-parse", "--short", "HEAD") or "?")
        + (" (dirty)" if git("status", "--porcelain", "--untracked-files=no") else ""),
    }
    if pg_url:
        try:
            info["postgresql"] = pg_info(pg_url)
        except Exception as exc:
            info["postgresql"] = f"unreachable ({exc})"
    if redis_url:
        try:
            info["redis"] = "Redis " + redis_info(redis_url).get("redis_version", "?")
        except OSError as exc:
            info["redis"] = f"unreachable ({exc})"
    return info
