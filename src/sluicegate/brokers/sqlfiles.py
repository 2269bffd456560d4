"""Load named SQL blocks and numbered migrations that live beside the code as .sql files."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from ..job import HELD, UNFINISHED, Event, sources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def _quoted(states: object) -> str:
    return ", ".join(f"'{s}'" for s in sorted(str(x) for x in states))  # type: ignore[attr-defined]


# State lists substituted into SQL, all derived from the pure transition table.
STATE_LISTS = {
    "held": _quoted(HELD),
    "unfinished": _quoted(UNFINISHED),
    "start_from": _quoted(sources(Event.START)),
    "cancel_from": _quoted(sources(Event.CANCEL)),
    "revive_from": _quoted(sources(Event.REVIVE)),
}


def _read(dialect: str, filename: str) -> str:
    return (resources.files("sluicegate.brokers") / "sql" / dialect / filename).read_text("utf-8")


def load_queries(dialect: str) -> dict[str, str]:
    """Every ``-- name: X`` block of ``sql/<dialect>/queries.sql``, keyed by name."""
    text = _read(dialect, "queries.sql")
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        # Comment lines are for readers of the .sql file; dropping them keeps expansion safe.
        lines = [ln for ln in body.splitlines() if not ln.lstrip().startswith("--")]
        sql = "\n".join(lines).strip()
        for key, value in STATE_LISTS.items():
            sql = sql.replace("{" + key + "}", value)
        queries[name] = sql
    return queries


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    statements: list[str]


def load_migrations(dialect: str) -> list[Migration]:
    """Numbered migrations ``NNNN_name.sql`` in order, split into single statements."""
    folder = resources.files("sluicegate.brokers") / "sql" / dialect
    found = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            text = entry.read_text("utf-8")
            lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("--")]
            body = "\n".join(lines)
            statements = [s.strip() for s in body.split(";") if s.strip()]
            found.append(Migration(int(match.group(1)), match.group(2), statements))
    return sorted(found, key=lambda m: m.version)
