"""The .sql files: named blocks with declared result columns, states taken from the
transition table, one substitution step."""

from __future__ import annotations

import re

import pytest

from sluicegate.brokers.sqlfiles import (
    FRAGMENT,
    JOB_COLUMNS,
    blocks,
    load_migrations,
    load_queries,
    render,
    result_columns,
    state_values,
)
from sluicegate.job import HELD, UNFINISHED, Event, JobState, sources

DIALECTS = ("sqlite", "postgresql")
STATE_LITERAL = re.compile("'(" + "|".join(s.value for s in JobState) + ")'")
VALUES = {
    "sqlite": {"job_columns": lambda alias: ", ".join(JOB_COLUMNS)},
    "postgresql": {
        "schema": '"s"',
        "now": "now()",
        "job_columns": lambda alias: ", ".join(f"{alias}.{c}" if alias else c for c in JOB_COLUMNS),
    },
}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_no_query_spells_a_state_itself(dialect: str) -> None:
    for block in blocks(dialect):
        assert STATE_LITERAL.search(block.sql) is None, (dialect, block.name, block.sql)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_query_loads_with_its_declared_columns(dialect: str) -> None:
    queries = load_queries(dialect, VALUES[dialect])
    assert set(queries) == {b.name for b in blocks(dialect) if not b.name.startswith(FRAGMENT)}
    for query in queries.values():
        assert "{" not in query.replace("'{}'", ""), query.name  # every placeholder filled in
        assert query.at == {c: i for i, c in enumerate(query.columns)}
    assert queries["get_job"].columns == JOB_COLUMNS


def test_state_placeholders_come_from_the_transition_table() -> None:
    values = state_values()
    assert values["ready"] == "'ready'"
    assert values["held"] == ", ".join(f"'{s}'" for s in JobState if s in HELD)
    assert values["unfinished"] == "'scheduled', 'ready', 'claimed', 'running'"
    for event in Event:
        assert values[f"{event.value}_from"] == ", ".join(f"'{s}'" for s in sources(event))


@pytest.mark.parametrize("dialect", DIALECTS)
def test_partial_indexes_of_the_migrations_match_the_placeholders(dialect: str) -> None:
    """Migrations are history and spell their states; a query's WHERE must still match the
    partial index it relies on, so both must list the same states in the same order."""
    text = " ".join(s for m in load_migrations(dialect, {"schema": "s"}) for s in m.statements)
    assert f"state IN ({state_values()['unfinished']})" in text
    assert f"state IN ({state_values()['held']})" in text
    listed = {"sqlite": f"state NOT IN ({state_values()['held']})",  # jobs_task
              "postgresql": f"state IN ({state_values()['unheld']})"}  # fmt: skip
    assert listed[dialect] in text
    assert set(STATE_LITERAL.findall(text)) <= {s.value for s in JobState}
    assert {s.value for s in UNFINISHED} <= set(STATE_LITERAL.findall(text))


def test_a_declaration_that_does_not_match_the_statement_is_refused() -> None:
    assert result_columns("UPDATE t SET a = 1 RETURNING t.id, c.token, x + 1 AS n", "q") == (
        "id",
        "token",
        "n",
    )
    assert result_columns("WITH w AS (SELECT a, b FROM t) SELECT w.a FROM w", "q") == ("a",)
    assert result_columns("DELETE FROM t WHERE id IN (SELECT id FROM t)", "q") == ()
    with pytest.raises(ValueError, match="name the result column"):
        result_columns("SELECT count(*) FROM t", "q")
    with pytest.raises(ValueError, match="name the result column"):
        result_columns("SELECT * FROM t", "q")


def test_render_fills_in_once_and_refuses_unknown_placeholders() -> None:
    assert render("a {x} {f:j}", {"x": "{y}", "f": lambda a: a + "!"}, "q") == "a {y} j!"
    with pytest.raises(ValueError, match="unknown placeholder"):
        render("{nope}", {}, "q")


def test_a_fragment_with_a_parameter_is_called_with_sql() -> None:
    from sluicegate.brokers.sqlfiles import Block, expand_calls

    fragments = {"fragment_add": Block("fragment_add", "coalesce(x, '(') + {value}", (), "value")}
    sql = "SELECT {fragment_add(f(1, ')', g(2)))} AS y, {fragment_add(3)} AS z"
    assert expand_calls(sql, fragments, "t") == (
        "SELECT (coalesce(x, '(') + f(1, ')', g(2))) AS y, (coalesce(x, '(') + 3) AS z"
    )
    with pytest.raises(ValueError, match="no fragment fragment_other"):
        expand_calls("{fragment_other(1)}", fragments, "t")
    with pytest.raises(ValueError, match="never closed"):
        expand_calls("{fragment_add(f(1)}", fragments, "t")
    with pytest.raises(ValueError, match="must end with"):
        expand_calls("{fragment_add(1) }", fragments, "t")
