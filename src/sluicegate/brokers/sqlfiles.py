"""Named SQL blocks and numbered migrations that live beside the code as .sql files.

A block starts with ``-- name: NAME``. A statement that returns rows says which, in order,
on the next line: ``-- columns: id, token, queue``, or ``-- returns: job`` for the columns
a Job is built from (``JOB_COLUMNS``; ``job.*`` stands for them inside a ``-- columns:``
list). The declaration is checked when the file is loaded, against the names in the
statement's own result list, and rows are read by those names (``Query.at``): no code
knows a column by its position.

Placeholders are filled in one step, ``render``: ``{name}``, or ``{name:arg}`` for a
value that takes an argument (``{job_columns:j}``, the job columns of table alias ``j``).
The state names come from sluicegate.job's transition table (``state_values``): ``{ready}``
is ``'ready'``, ``{held}`` the states a lease holds (``{unheld}`` the others),
``{cancel_from}`` the states the cancel event may start from, and so on; a history
entry's event, ``{happened_cancelled}``, from sluicegate.job.Happened. No .sql file
spells a state itself. A ``fragment_`` block is SQL text shared by other blocks:
``{fragment_x}``, or, for one that takes a parameter, ``{fragment_x(SQL)}``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources

from ..job import (
    EXPIRED,
    HELD,
    HISTORY_CAP,
    HISTORY_MESSAGE,
    TERMINAL,
    UNFINISHED,
    Event,
    Happened,
    JobState,
    sources,
)

# The columns a Job is built from, as every dialect's job rows name them.
JOB_COLUMNS = (
    "id", "queue", "task", "args", "kwargs", "state", "priority", "run_at", "attempts",
    "max_attempts", "unique_key", "worker_id", "lease_expires_at", "enqueued_at",
    "started_at", "finished_at", "result", "last_error", "limits", "history",
    "progress", "headers", "expires_at",
)  # fmt: skip

Value = str | Callable[[str], str]

_NAME = re.compile(r"^--\s*name:\s*(\w+)(?:\((\w+)\))?\s*$", re.MULTILINE)
_CALL = re.compile(r"\{(fragment_\w+)\(")
_DECLARED = re.compile(r"--\s*(columns|returns):\s*(.+)")
_PLACEHOLDER = re.compile(r"\{(\w+)(?::(\w+))?\}")
_VERB = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
_RETURNING = re.compile(r"\bRETURNING\b", re.IGNORECASE)
_FROM = re.compile(r"\bFROM\b", re.IGNORECASE)
_ALIAS = re.compile(r"\bAS\s+(\w+)\s*$", re.IGNORECASE)
_COLUMN = re.compile(r"^(?:\w+\.)?(\w+)$")


def _quoted(states: frozenset[JobState] | tuple[JobState, ...]) -> str:
    """SQL string literals in JobState's order (the order the migrations' indexes use)."""
    return ", ".join(f"'{s.value}'" for s in JobState if s in states)


@cache
def state_values() -> dict[str, str]:
    """Every state placeholder, derived from the pure transition table."""
    values = {s.value: _quoted((s,)) for s in JobState}
    values.update(held=_quoted(HELD), unfinished=_quoted(UNFINISHED), terminal=_quoted(TERMINAL))
    values["unheld"] = _quoted(frozenset(JobState) - HELD)  # what the listing indexes hold
    values.update({f"{event.value}_from": _quoted(sources(event)) for event in Event})
    values.update(history_cap=str(HISTORY_CAP), history_message=str(HISTORY_MESSAGE))
    values.update({f"happened_{h.name.lower()}": f"'{h.value}'" for h in Happened})
    values["reason_expired"] = f"'{EXPIRED}'"  # a cancelled entry's reason (expiry)
    values["expire_from"] = _quoted((JobState.SCHEDULED, JobState.READY))  # jobs_expiring
    return values


def render(text: str, values: Mapping[str, Value], where: str) -> str:
    """Fill in every placeholder of ``text``; an unknown one is an error naming ``where``."""

    def fill(match: re.Match[str]) -> str:
        name, arg = match.group(1), match.group(2)
        value = values.get(name)
        if value is None:
            raise ValueError(f"{where}: unknown placeholder {match.group(0)}")
        if callable(value):
            return value(arg or "")
        if arg is not None:
            raise ValueError(f"{where}: {{{name}}} takes no argument")
        return value

    return _PLACEHOLDER.sub(fill, text)


class Query(str):
    """One rendered statement, usable wherever SQL text is, with its declared result
    columns (empty: it returns no rows) and each column's position (``at``)."""

    name: str
    columns: tuple[str, ...]
    at: dict[str, int]

    def __new__(cls, name: str, sql: str, columns: tuple[str, ...]) -> Query:
        query = super().__new__(cls, sql)
        query.name, query.columns = name, columns
        query.at = {column: i for i, column in enumerate(columns)}
        return query


@dataclass(frozen=True, slots=True)
class Block:
    name: str
    sql: str  # comment lines dropped, placeholders not yet filled in
    declared: tuple[str, ...]  # () for a statement that returns no rows
    parameter: str | None = None  # a fragment's, named in its header: fragment_x(entry)


def _read(dialect: str, filename: str) -> str:
    return (resources.files("sluicegate.brokers") / "sql" / dialect / filename).read_text("utf-8")


def _uncommented(text: str) -> str:
    """Comment lines are for readers of the .sql file; dropping them keeps rendering safe."""
    return "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("--"))


@cache
def blocks(dialect: str) -> tuple[Block, ...]:
    """Every ``-- name: X`` block of ``sql/<dialect>/queries.sql``, unrendered."""
    parts = _NAME.split(_read(dialect, "queries.sql"))
    found = []
    for name, parameter, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        first = body.strip().splitlines()[0] if body.strip() else ""
        declared: tuple[str, ...] = ()
        if match := _DECLARED.fullmatch(first.strip()):
            kind, names = match.groups()
            if kind == "returns" and names.strip() != "job":
                raise ValueError(f"{dialect} query {name}: only '-- returns: job' is known")
            listed = ["job.*"] if kind == "returns" else [n.strip() for n in names.split(",")]
            declared = tuple(c for n in listed for c in (JOB_COLUMNS if n == "job.*" else (n,)))
        sql = _uncommented(body).strip().rstrip(";").strip()
        found.append(Block(name, sql, declared, parameter))
    return tuple(found)


FRAGMENT = "fragment_"  # a block named fragment_X is SQL text other blocks include as {fragment_X}


def load_queries(dialect: str, values: Mapping[str, Value]) -> dict[str, Query]:
    """The dialect's queries, rendered with ``values`` (and the state placeholders), each
    checked against its declared result columns. A ``fragment_`` block is no query: it is
    rendered first and filled in wherever another block names it (shared CTEs). One that
    names a parameter (``-- name: fragment_x(entry)``) is called with an argument instead,
    ``{fragment_x(SQL)}``, and its ``{entry}`` becomes that SQL (``expand_calls``)."""
    values = {**state_values(), **values}
    called = {}
    for block in blocks(dialect):
        if block.name.startswith(FRAGMENT) and block.parameter:
            called[block.name] = block
        elif block.name.startswith(FRAGMENT):
            values[block.name] = render(block.sql, values, f"{dialect} fragment {block.name}")
    queries = {}
    for block in blocks(dialect):
        if block.name.startswith(FRAGMENT):
            continue
        where = f"{dialect} query {block.name}"
        sql = block.sql
        while _CALL.search(sql):  # a fragment's own calls too (fragment_expire's history)
            sql = expand_calls(sql, called, where)
        sql = unindented(render(sql, values, where))
        found = result_columns(sql, where)
        if found != block.declared:
            raise ValueError(
                f"{where}: declares columns {', '.join(block.declared) or '(none)'} but "
                f"returns {', '.join(found) or '(none)'}"
            )
        queries[block.name] = Query(block.name, sql, block.declared)
    return queries


def unindented(sql: str) -> str:
    """``sql`` without its lines' indentation: the server never reads it, and psycopg
    caches the conversion of a statement's placeholders only up to 4 kB of text (the
    claim's is longer with it). No literal in these files spans lines."""
    return "\n".join(line.strip() for line in sql.splitlines())


def expand_calls(sql: str, fragments: Mapping[str, Block], where: str) -> str:
    """Each ``{fragment_x(ARG)}`` of ``sql`` replaced by fragment x's SQL, in parentheses,
    with ARG (any SQL, parentheses balanced) where it names its parameter. The result is
    rendered as the rest of the statement is."""
    out, at = [], 0
    while call := _CALL.search(sql, at):
        block = fragments.get(call.group(1))
        if block is None or block.parameter is None:
            raise ValueError(f"{where}: no fragment {call.group(1)}(...) takes an argument")
        end = _closing(sql, call.end(), where)
        if sql[end : end + 2] != ")}":
            raise ValueError(f"{where}: {call.group(1)}(...) must end with ')}}'")
        argument = sql[call.end() : end].strip()
        out += [
            sql[at : call.start()],
            "(",
            block.sql.replace(f"{{{block.parameter}}}", argument),
            ")",
        ]
        at = end + 2
    return "".join([*out, sql[at:]])


def _closing(sql: str, start: int, where: str) -> int:
    """Where the parenthesis open before ``start`` closes (quoted text skipped)."""
    depth, quote = 0, ""
    for i in range(start, len(sql)):
        ch = sql[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                return i
            depth -= 1
    raise ValueError(f"{where}: a fragment call's parenthesis is never closed")


def _flattened(sql: str) -> str:
    """``sql`` with everything inside parentheses and quotes blanked out, same length: what
    is left is the statement's top level."""
    out, depth, quote = [], 0, ""
    for ch in sql:
        if quote:
            out.append(" ")
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            out.append(" ")
        elif ch == "(":
            depth += 1
            out.append(" ")
        elif ch == ")":
            depth -= 1
            out.append(" ")
        else:
            out.append(ch if depth == 0 else " ")
    return "".join(out)


def result_columns(sql: str, where: str) -> tuple[str, ...]:
    """The names of a statement's result columns, read from its top-level RETURNING list
    or (a query) its final SELECT list; every item needs a name: a column or ``AS name``."""
    flat = _flattened(sql)
    verb = _VERB.search(flat)
    if verb is None:
        return ()
    if verb.group(1).upper() == "SELECT":
        start = [m.end() for m in _VERB.finditer(flat) if m.group(1).upper() == "SELECT"][-1]
        end_match = _FROM.search(flat, start)
        end = end_match.start() if end_match else len(sql)
    else:
        returning = list(_RETURNING.finditer(flat))
        if not returning:
            return ()
        start, end = returning[-1].end(), len(sql)
    names = []
    cut = start
    for i in [*(i for i in range(start, end) if flat[i] == ","), end]:
        item, flat_item = sql[cut:i].strip(), flat[cut:i].strip()
        cut = i + 1
        alias, plain = _ALIAS.search(flat_item), _COLUMN.match(item)
        if alias is not None:
            names.append(alias.group(1))
        elif plain is not None:
            names.append(plain.group(1))
        else:
            raise ValueError(f"{where}: name the result column {item!r} with AS")
    return tuple(names)


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    statements: list[str]


def load_migrations(dialect: str, values: Mapping[str, Value] | None = None) -> list[Migration]:
    """Numbered migrations ``NNNN_name.sql`` in order, rendered, split into statements.

    Migrations are history: they spell their states out, as they were when written."""
    folder = resources.files("sluicegate.brokers") / "sql" / dialect
    found = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            body = render(_uncommented(entry.read_text("utf-8")), values or {}, entry.name)
            statements = [s.strip() for s in body.split(";") if s.strip()]
            found.append(Migration(int(match.group(1)), match.group(2), statements))
    return sorted(found, key=lambda m: m.version)
