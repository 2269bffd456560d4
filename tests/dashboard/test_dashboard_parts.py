"""The dashboard's pure parts: SVG charts and bars, the figures' formats, a job's
timeline from its history, and the small rules of the security module."""

from __future__ import annotations

import re

import pytest

from sluicegate.dashboard import charts, format
from sluicegate.dashboard.data import Source, display_url
from sluicegate.dashboard.security import Policy, is_loopback, route_path, token_problem
from sluicegate.dashboard.timeline import timeline
from sluicegate.job import ErrorInfo, Job, JobId, JobState


def test_bar_is_clamped_and_hot_when_nearly_full() -> None:
    assert 'width="50.0"' in charts.bar(0.5)
    assert 'width="100.0"' in charts.bar(7.0) and "bar-hot" in charts.bar(0.95)
    assert 'width="0.0"' in charts.bar(-1) and 'width="0.0"' in charts.bar(None)
    assert "bar-hot" not in charts.bar(0.5)
    assert "&lt;b&gt;" in charts.bar(0.1, "<b>")


@pytest.mark.parametrize(
    ("value", "top"), [(0, 1), (0.3, 0.5), (1, 1), (1.01, 2), (4.2, 5), (7, 10), (120, 200)]
)
def test_axis_tops_are_one_two_five(value: float, top: float) -> None:
    assert charts.nice_ceiling(value) == pytest.approx(top)


def test_line_chart_draws_gaps_and_escapes_names() -> None:
    svg = charts.line_chart(
        {"<q>": [1.0, 2.0, None, 4.0, 5.0], "b": [None, None, None, None, 3.0]},
        title="<t>",
        step_s=60,
        label=format.rate,
    )
    assert str(svg).startswith("<svg") and "<q>" not in svg and "&lt;q&gt;" in svg
    assert svg.count("<polyline") == 2  # one line broken by the gap in two
    assert svg.count("<circle") == 1  # b's single point
    assert "-4 min" in svg and ">now<" in svg and "5.0/s" in svg  # top of the axis
    empty = charts.line_chart({}, title="x", step_s=60, label=format.age)
    assert "no figures yet" in empty


def test_utilisation_chart_tops_at_100_percent() -> None:
    svg = charts.line_chart({"p": [0.1, 0.2]}, title="u", step_s=60, label=format.pct, ceiling=1.0)
    assert ">100%<" in svg and ">50%<" in svg


def test_values_are_cut_with_a_note() -> None:
    assert format.cut("abc", 5) == "abc"
    assert format.cut("x" * 10, 4) == "xxxx\u2026 (6 more characters)"
    assert format.pretty({"a": [1]}) == '{\n  "a": [\n    1\n  ]\n}'
    assert format.brief(["<x>"]) == '["<x>"]'  # escaping is the template's
    assert format.age(3.25) == "3.2s" and format.age(400) == "6.7m" and format.age(None) == "-"
    assert format.rate(2.5) == "2.5/s" and format.pct(0.5) == "50%"
    assert format.when(0) == "1970-01-01 00:00:00Z"


def job(**fields: object) -> Job:
    base: dict[str, object] = {"id": JobId(7), "task": "t", "queue": "q",
                               "state": JobState.READY, "enqueued_at": 100.0, "run_at": 100.0}  # fmt: skip
    return Job.from_fields(**{**base, **fields})


def test_timeline_of_the_happy_path() -> None:
    done = job(state=JobState.SUCCEEDED, attempts=1, started_at=101.0, finished_at=102.0)
    assert [e["event"] for e in timeline(done, [])] == ["enqueued", "started", "succeeded"]
    later = job(state=JobState.SCHEDULED, run_at=500.0)
    assert [e["event"] for e in timeline(later, [])] == ["enqueued", "due"]


def test_timeline_weaves_the_history_in_by_time() -> None:
    dead = job(
        state=JobState.DEAD, attempts=3, started_at=130.0, finished_at=131.0,
        last_error=ErrorInfo("Boom", "third"), worker_id="w-3",
    )  # fmt: skip
    history = [
        {"at": 110.0, "event": "failed", "attempt": 1, "worker": "w-1",
         "error": {"type": "Boom", "message": "first"}, "retry_at": 115.0},
        {"at": 120.0, "event": "recovered", "attempt": 2, "worker": "w-2",
         "error": {"type": "WorkerLost", "message": "lease expired"}},
        {"at": "not a time", "event": None, "attempt": "x"},
    ]  # fmt: skip
    entries = timeline(dead, history)
    assert [e["event"] for e in entries] == ["enqueued", "failed", "recovered", "started",
                                             "dead", "?"]  # fmt: skip
    failed = entries[1]
    assert failed["error"] == "Boom: first" and failed["retry_at"] == 115.0
    assert failed["worker"] == "w-1" and failed["attempt"] == 1
    assert entries[4]["error"] == "Boom: third"


@pytest.mark.parametrize(
    ("at", "history_at"),  # one instant either side of a millisecond's midpoint
    [(1_700_000_000.1234995, 1_700_000_000.1235045), (1_700_000_000.1235005, 1_700_000_000.1234955)],
)  # fmt: skip
def test_one_instant_stored_as_two_nearby_floats_is_one_instant(
    at: float, history_at: float
) -> None:
    """SQLite's JSON keeps 15 significant digits, so a history entry's time can be a few
    microseconds off the job's own timestamps of the same instant (a job that fails for
    good: started_at, the history's "failed" and finished_at are one clock reading)."""
    assert round(at, 3) != round(history_at, 3)  # the two straddle a millisecond's step
    dead = job(state=JobState.DEAD, attempts=1, enqueued_at=at - 1.0, run_at=at - 1.0,
               started_at=at, finished_at=at, last_error=ErrorInfo("Boom", "once"))  # fmt: skip
    history = [{"at": history_at, "event": "failed", "attempt": 1, "dead": True,
                "error": {"type": "Boom", "message": "once"}}]  # fmt: skip
    events = [e["event"] for e in timeline(dead, history)]
    assert events == ["enqueued", "started", "failed", "dead"]


def test_a_cancel_shows_once_with_the_state_it_left() -> None:
    gone = job(state=JobState.CANCELLED, finished_at=105.0)
    history = [{"at": 105.0, "event": "cancelled", "attempt": 0, "from": "ready"}]
    entries = timeline(gone, history)
    assert [e["event"] for e in entries] == ["enqueued", "cancelled"]
    assert entries[1]["detail"] == "from ready"


def test_history_is_read_when_jobs_carry_it() -> None:
    plain = job()
    assert Source.history_of(plain) == []
    object.__setattr__(plain, "history", [{"at": 1.0, "event": "released"}, "junk"])
    assert Source.history_of(plain) == [{"at": 1.0, "event": "released"}]


def test_broker_urls_are_shown_without_passwords() -> None:
    assert display_url("postgresql://app:s3cret@db:5432/jobs?schema=x") == (
        "postgresql://app:***@db:5432/jobs?schema=x"
    )
    assert display_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True),
     ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.0.0.5", False),
     ("example.com", False)],
)  # fmt: skip
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_tokens_and_secrets() -> None:
    assert token_problem("short") and token_problem(" " * 20)
    assert token_problem("a-long-enough-token-1") is None
    a = Policy.of("a-long-enough-token-1", None, False, None)
    b = Policy.of("a-long-enough-token-1", None, False, None)
    assert a.secret == b.secret  # processes serving one dashboard agree
    assert Policy.of(None, None, False, None).secret != Policy.of(None, None, False, None).secret
    assert a.sign("csrf", "n") != a.sign("flash", "n")
    assert re.fullmatch(r"[0-9a-f]{64}", a.session_value())
    assert a.token_matches("a-long-enough-token-1") and not a.token_matches("a-long")


def test_route_paths_under_a_prefix() -> None:
    assert route_path({"path": "/ops/jobs/", "root_path": "/ops"}) == "/jobs/"
    assert route_path({"path": "/ops", "root_path": "/ops"}) == "/"
    assert route_path({"path": "/opsx/login", "root_path": "/ops"}) == "/opsx/login"
    assert route_path({"path": "/login", "root_path": ""}) == "/login"
