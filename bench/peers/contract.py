"""The command line every adapter takes (bench/peers/README.md): one parser, so a new
option or role reaches every system at once. Standard library only: the peers'
virtualenv imports it, found next to the adapter by ``sys.path[0]``."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

ROLES = ("setup", "enqueue", "latency", "worker", "describe")


def parse_args(doc: str | None, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The role and its options; ``--broker`` falls back to ``PEER_BROKER`` (set for the
    worker processes a system starts on its own)."""
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("role", choices=ROLES)
    p.add_argument("--broker", default=os.environ.get("PEER_BROKER", ""))
    p.add_argument("--sink", default="")
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--mode", choices=["one", "bulk"], default="one")
    p.add_argument("--task", choices=["noop", "io20"], default="noop")
    p.add_argument("--sent", action="store_true")
    p.add_argument("--spacing", type=float, default=20.0, help="ms before each latency job")
    p.add_argument("--concurrency", default="default")
    return p.parse_args(argv)
