"""A PostgreSQL server of the benchmark's own, configured as a user would run one.

A shared or CI server may be tuned for tests (this machine's runs with autovacuum off);
figures about dead tuples and table growth mean little there. ``own_cluster()`` makes a
fresh cluster with initdb's defaults (autovacuum on, fsync on, synchronous_commit on),
started on a free loopback port, and removes it afterwards, even after an error.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator


def find_bindir() -> str:
    """The folder of initdb and pg_ctl: on PATH, or the newest /usr/lib/postgresql/*/bin."""
    initdb = shutil.which("initdb")
    if initdb:
        return os.path.dirname(initdb)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    if not found:
        raise SystemExit("--own-cluster needs PostgreSQL's initdb and pg_ctl (none found)")
    return os.path.dirname(found[0])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def own_cluster(max_connections: int = 200) -> Iterator[str]:
    """Yields the DSN of a fresh cluster (database ``postgres``, trust authentication)."""
    bindir = find_bindir()
    root = tempfile.mkdtemp(prefix="sluicegate-bench-pg-")
    data, log, port = os.path.join(root, "data"), os.path.join(root, "log"), _free_port()
    run_as: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        run_as = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    options = (
        f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections={max_connections}"
    )
    try:
        subprocess.run(
            [*run_as, f"{bindir}/initdb", "-D", data, "-U", "postgres", "-A", "trust"],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [*run_as, f"{bindir}/pg_ctl", "-D", data, "-w", "-l", log, "-o", options, "start"],
            check=True,
            capture_output=True,
        )
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*run_as, f"{bindir}/pg_ctl", "-D", data, "-m", "fast", "stop"],
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)
