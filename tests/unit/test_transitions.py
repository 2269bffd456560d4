"""The pure parts: job.py's transition table, retry.py, codec.py and names.py."""

from __future__ import annotations

import json
import math
import re
from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluicegate.codec import (
    DEFAULT_PAYLOAD_LIMIT,
    dumps,
    encode_payload,
    encode_result,
    loads,
)
from sluicegate.errors import ConfigError, InvalidTransition, SerializationError
from sluicegate.job import (
    HELD,
    TERMINAL,
    TRANSITIONS,
    UNFINISHED,
    Claim,
    ErrorInfo,
    Event,
    Job,
    JobId,
    JobState,
    apply,
    can_apply,
    initial_state,
    sources,
)
from sluicegate.names import NAME_RULE, check_name
from sluicegate.outcomes import Buried, Retried, Succeeded
from sluicegate.retry import (
    MAX_MESSAGE,
    MAX_TRACEBACK,
    RetryPolicy,
    backoff,
    decide,
    error_info,
    failure,
    plain_error,
)

S = JobState
E = Event
STATES = list(JobState)
EVENTS = list(Event)

# The lifecycle of DESIGN.md section 1, written out by hand, independently of job.py.
EXPECTED: dict[tuple[JobState, Event], JobState] = {
    (S.SCHEDULED, E.PROMOTE): S.READY,
    (S.READY, E.CLAIM): S.CLAIMED,
    (S.CLAIMED, E.START): S.RUNNING,
    (S.CLAIMED, E.ACK): S.SUCCEEDED,
    (S.RUNNING, E.ACK): S.SUCCEEDED,
    (S.CLAIMED, E.RETRY): S.SCHEDULED,
    (S.RUNNING, E.RETRY): S.SCHEDULED,
    (S.CLAIMED, E.BURY): S.DEAD,
    (S.RUNNING, E.BURY): S.DEAD,
    (S.CLAIMED, E.RELEASE): S.READY,
    (S.RUNNING, E.RELEASE): S.READY,
    (S.CLAIMED, E.RECOVER): S.READY,
    (S.RUNNING, E.RECOVER): S.READY,
    (S.CLAIMED, E.RECOVER_DEAD): S.DEAD,
    (S.RUNNING, E.RECOVER_DEAD): S.DEAD,
    (S.SCHEDULED, E.CANCEL): S.CANCELLED,
    (S.READY, E.CANCEL): S.CANCELLED,
    (S.CLAIMED, E.CANCEL): S.CANCELLED,
    (S.RUNNING, E.CANCEL): S.CANCELLED,
    (S.DEAD, E.REVIVE): S.READY,
    (S.CANCELLED, E.REVIVE): S.READY,
}

START_STATES = (S.SCHEDULED, S.READY)  # where enqueue puts a job
TRANSITIONS_BY_STATE = {s: {e for (s2, e) in TRANSITIONS if s2 is s} for s in STATES}


# ---- job.py: the table ------------------------------------------------------------
def test_state_sets() -> None:
    assert frozenset({S.SUCCEEDED, S.DEAD, S.CANCELLED}) == TERMINAL
    assert frozenset({S.CLAIMED, S.RUNNING}) == HELD
    assert frozenset({S.SCHEDULED, S.READY, S.CLAIMED, S.RUNNING}) == UNFINISHED
    assert [s.value for s in STATES] == [
        "scheduled",
        "ready",
        "claimed",
        "running",
        "succeeded",
        "dead",
        "cancelled",
    ]


def test_table_is_the_designed_lifecycle() -> None:
    assert dict(TRANSITIONS) == EXPECTED


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("event", EVENTS)
def test_every_state_event_pair(state: JobState, event: Event) -> None:
    expected = EXPECTED.get((state, event))
    assert can_apply(state, event) is (expected is not None)
    if expected is None:
        with pytest.raises(InvalidTransition, match=f"cannot {event.value} a job that is {state}"):
            apply(state, event)
    else:
        assert apply(state, event) is expected


@pytest.mark.parametrize("event", EVENTS)
def test_sources_agree_with_apply(event: Event) -> None:
    found = sources(event)
    assert found == tuple(s for s in STATES if can_apply(s, event))  # stable: enum order
    assert len(set(found)) == len(found)
    for state in found:
        apply(state, event)
    for state in set(STATES) - set(found):
        with pytest.raises(InvalidTransition):
            apply(state, event)


def test_every_event_is_used() -> None:
    assert all(sources(e) for e in EVENTS)


def test_terminal_states_only_leave_by_revive() -> None:
    for (state, event), target in TRANSITIONS.items():
        if state in TERMINAL:
            assert event is E.REVIVE and target is S.READY
    assert sources(E.REVIVE) == (S.DEAD, S.CANCELLED)
    assert not any(can_apply(S.SUCCEEDED, e) for e in EVENTS)


def test_held_events_only_from_held_states() -> None:
    for event in (E.START, E.ACK, E.RETRY, E.BURY, E.RELEASE, E.RECOVER, E.RECOVER_DEAD):
        assert set(sources(event)) <= HELD
    assert set(sources(E.CANCEL)) == UNFINISHED


def _reachable(starts: tuple[JobState, ...]) -> set[JobState]:
    seen, todo = set(starts), deque(starts)
    while todo:
        state = todo.popleft()
        for event in EVENTS:
            if can_apply(state, event) and (nxt := apply(state, event)) not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_every_state_is_reachable_from_enqueue() -> None:
    assert _reachable(START_STATES) == set(STATES)
    assert _reachable((S.SCHEDULED,)) == set(STATES)


@pytest.mark.parametrize("state", STATES)
def test_every_state_can_finish(state: JobState) -> None:
    """No trap: from anywhere some path leads to a terminal state (and only terminal
    states lack a way forward that is not REVIVE)."""
    assert _reachable((state,)) & TERMINAL


@given(
    start=st.sampled_from(START_STATES),
    events=st.lists(st.sampled_from(EVENTS), max_size=60),
)
def test_random_event_sequences_stay_in_the_table(start: JobState, events: list[Event]) -> None:
    state = start
    for event in events:
        if can_apply(state, event):
            nxt = apply(state, event)
            assert nxt is TRANSITIONS[(state, event)]
            assert isinstance(nxt, JobState)
            if state in TERMINAL:
                assert event is E.REVIVE
            if nxt in HELD:  # a job is only ever held through a claim (or a start of one)
                assert event in (E.CLAIM, E.START)
            state = nxt
        else:
            with pytest.raises(InvalidTransition):
                apply(state, event)
        assert state in STATES


@given(
    start=st.sampled_from(START_STATES),
    choices=st.lists(st.integers(min_value=0), max_size=60),
)
def test_random_walks_of_allowed_events(start: JobState, choices: list[int]) -> None:
    """Walks that only take allowed events never get stuck outside a terminal state and
    every step is in the table."""
    state = start
    for choice in choices:
        allowed = [e for e in EVENTS if can_apply(state, e)]
        if not allowed:
            assert state is S.SUCCEEDED
            break
        event = allowed[choice % len(allowed)]
        assert event in TRANSITIONS_BY_STATE[state]
        state = apply(state, event)


@given(
    run_at=st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12),
    now=st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12),
)
def test_initial_state(run_at: float, now: float) -> None:
    assert initial_state(run_at, now) is (S.READY if run_at <= now else S.SCHEDULED)


def test_initial_state_boundary() -> None:
    assert initial_state(10.0, 10.0) is S.READY
    assert initial_state(10.000001, 10.0) is S.SCHEDULED


# ---- job.py: values -----------------------------------------------------------------
@given(st.text(), st.text(), st.text())
def test_error_info_round_trips(kind: str, message: str, trace: str) -> None:
    info = ErrorInfo(kind, message, trace)
    assert ErrorInfo.from_dict(json.loads(json.dumps(info.to_dict()))) == info


def test_error_info_str_and_partial_dict() -> None:
    assert str(ErrorInfo("ValueError", "bad")) == "ValueError: bad"
    assert str(ErrorInfo("Timeout", "")) == "Timeout"
    assert ErrorInfo.from_dict({"type": "X"}) == ErrorInfo("X", "", "")


def test_job_to_dict_and_finished() -> None:
    job = Job(id=JobId(3), task="t", queue="q", state=S.DEAD, last_error=ErrorInfo("E", "m"))
    data = job.to_dict()
    assert data["state"] == "dead" and data["last_error"] == {
        "type": "E",
        "message": "m",
        "traceback": "",
    }
    assert json.loads(json.dumps(data)) == data
    assert set(data) == set(Job.__dataclass_fields__)
    for state in STATES:
        assert Job(id=JobId(1), task="t", queue="q", state=state).finished is (state in TERMINAL)


# ---- retry.py ---------------------------------------------------------------------------
NO_JITTER = RetryPolicy(backoff_base=1.0, backoff_factor=2.0, backoff_max=100.0, jitter=0.0)


def test_backoff_without_jitter_is_exponential_then_capped() -> None:
    delays = [backoff(NO_JITTER, a) for a in range(1, 10)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 100.0, 100.0]


@given(
    base=st.floats(min_value=0.001, max_value=100),
    factor=st.floats(min_value=1.0, max_value=10),
    cap=st.floats(min_value=0.001, max_value=1e6),
    attempts=st.lists(st.integers(min_value=-5, max_value=5000), min_size=2, max_size=2),
)
def test_backoff_without_jitter_is_monotone_and_capped(
    base: float, factor: float, cap: float, attempts: list[int]
) -> None:
    policy = RetryPolicy(backoff_base=base, backoff_factor=factor, backoff_max=cap, jitter=0.0)
    low, high = sorted(attempts)
    d_low, d_high = backoff(policy, low), backoff(policy, high)
    assert 0.0 <= d_low <= d_high <= cap
    assert not math.isnan(d_high)
    assert backoff(policy, 1) == min(base, cap)


def test_backoff_survives_huge_attempt_numbers() -> None:
    assert backoff(NO_JITTER, 10**6) == 100.0
    int_factor = RetryPolicy(backoff_factor=3, backoff_max=7.0, jitter=0.0)
    assert backoff(int_factor, 10**5) == 7.0


def test_backoff_attempt_zero_or_less_is_the_base() -> None:
    assert backoff(NO_JITTER, 0) == backoff(NO_JITTER, -3) == 1.0


@given(
    attempt=st.integers(min_value=1, max_value=40),
    jitter=st.floats(min_value=0.0, max_value=1.0),
    r=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_jitter_stays_within_its_bounds(attempt: int, jitter: float, r: float) -> None:
    policy = RetryPolicy(backoff_base=2.0, backoff_factor=2.0, backoff_max=600.0, jitter=jitter)
    plain = backoff(RetryPolicy(backoff_base=2.0, backoff_max=600.0, jitter=0.0), attempt)
    delay = backoff(policy, attempt, rand=lambda: r)
    assert plain * (1 - jitter) - 1e-9 <= delay <= plain * (1 + jitter) + 1e-9
    assert delay >= 0.0


def test_jitter_extremes() -> None:
    policy = RetryPolicy(backoff_base=10.0, backoff_max=1000.0, jitter=0.25)
    assert backoff(policy, 1, rand=lambda: 0.0) == 7.5
    assert backoff(policy, 1, rand=lambda: 0.5) == 10.0
    assert backoff(policy, 1, rand=lambda: 1.0) == 12.5
    wild = RetryPolicy(backoff_base=10.0, jitter=3.0)
    assert backoff(wild, 1, rand=lambda: 0.0) == 0.0  # never negative


def test_default_rand_is_used_and_bounded() -> None:
    policy = RetryPolicy(backoff_base=4.0, jitter=0.5)
    assert all(2.0 <= backoff(policy, 1) <= 6.0 for _ in range(200))


class Retryable(Exception):
    pass


class SubRetryable(Retryable):
    pass


def test_decide_when_attempts_are_left() -> None:
    policy = RetryPolicy(backoff_base=3.0, jitter=0.0)
    assert decide(policy, 1, 3, ValueError("x")) == 3.0
    assert decide(policy, 2, 3, None) == 6.0
    assert decide(policy, 1, 3, None, rand=lambda: 0.9) == 3.0


@given(attempts=st.integers(min_value=1, max_value=50), max_attempts=st.integers(1, 50))
def test_decide_returns_none_once_attempts_are_exhausted(attempts: int, max_attempts: int) -> None:
    result = decide(RetryPolicy(), attempts, max_attempts, RuntimeError())
    assert (result is None) is (attempts >= max_attempts)


def test_decide_honours_retry_on() -> None:
    policy = RetryPolicy(retry_on=(Retryable, KeyError), jitter=0.0)
    assert decide(policy, 1, 5, ValueError()) is None
    assert decide(policy, 1, 5, Retryable()) == 1.0
    assert decide(policy, 1, 5, SubRetryable()) == 1.0
    assert decide(policy, 1, 5, KeyError()) == 1.0
    assert decide(policy, 1, 5, None) == 1.0  # timeouts and lost children always retry
    assert decide(policy, 5, 5, Retryable()) is None


@given(attempts=st.integers(min_value=1, max_value=50), max_attempts=st.integers(1, 50))
def test_failure_outcome_carries_its_event(attempts: int, max_attempts: int) -> None:
    """A failure is decided once, into a value that names its event: brokers and the
    worker read ``event``, never infer it from a field."""
    claim = Claim(JobId(7), 11)
    error = ErrorInfo("E", "boom")
    outcome = failure(RetryPolicy(jitter=0.0), claim, attempts, max_attempts, error)
    if attempts >= max_attempts:
        assert outcome == Buried(claim, error)
        assert outcome.event is Event.BURY
    else:
        assert isinstance(outcome, Retried)
        assert outcome.event is Event.RETRY
        assert outcome.retry_in == decide(RetryPolicy(jitter=0.0), attempts, max_attempts, None)
    assert apply(JobState.RUNNING, outcome.event) in (JobState.DEAD, JobState.SCHEDULED)


def test_an_exception_outside_retry_on_is_buried() -> None:
    policy = RetryPolicy(retry_on=(KeyError,))
    outcome = failure(policy, Claim(JobId(1), 1), 1, 5, ErrorInfo("V", ""), ValueError())
    assert outcome.event is Event.BURY
    assert Succeeded(Claim(JobId(1), 1), "null").event is Event.ACK


def test_error_info_of_an_exception() -> None:
    try:
        raise SubRetryable("it broke")
    except SubRetryable as exc:
        info = error_info(exc)
    assert info.type == "SubRetryable"
    assert info.message == "it broke"
    assert "Traceback" in info.traceback and "it broke" in info.traceback


def test_error_info_is_truncated_at_both_ends() -> None:
    message = "A" * 10 + "x" * (MAX_MESSAGE * 3) + "Z" * 10
    try:
        raise ValueError(message)
    except ValueError as exc:
        info = error_info(exc)
    assert len(info.message) < MAX_MESSAGE + 100
    assert info.message.startswith("AAAAAAAAAA") and info.message.endswith("ZZZZZZZZZZ")
    assert "truncated" in info.message
    assert len(info.traceback) < MAX_TRACEBACK + 100
    short = plain_error("Timeout", "took too long")
    assert short == ErrorInfo("Timeout", "took too long", "")
    assert len(plain_error("X", "y" * (MAX_MESSAGE + 1)).message) < MAX_MESSAGE + 100


# ---- codec.py -----------------------------------------------------------------------------
def test_encode_payload_is_compact_json() -> None:
    args_json, kwargs_json = encode_payload("t", (1, "é", [None, True]), {"a": {"b": 1.5}})
    assert args_json == '[1,"é",[null,true]]'
    assert kwargs_json == '{"a":{"b":1.5}}'
    assert loads(args_json) == [1, "é", [None, True]]


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(args=st.lists(JSON_VALUES, max_size=5), kwargs=st.dictionaries(st.text(), JSON_VALUES))
def test_json_payloads_round_trip(args: list[object], kwargs: dict[str, object]) -> None:
    args_json, kwargs_json = encode_payload("t", args, kwargs)
    assert loads(args_json) == args and loads(kwargs_json) == kwargs
    assert loads(dumps(args)) == args


@pytest.mark.parametrize(
    ("args", "kwargs", "named"),
    [
        ([1, object()], {}, "argument 1"),
        ([b"bytes"], {}, "argument 0"),
        ([1, 2, {"deep": [{1, 2}]}], {}, "argument 2"),
        ([float("nan")], {}, "argument 0"),
        ([1, float("inf")], {}, "argument 1"),
        ([], {"ok": 1, "when": object()}, "keyword argument 'when'"),
        ([], {"x": -float("inf")}, "keyword argument 'x'"),
        ([], {(1, 2): "v"}, "keyword (1, 2)"),
    ],
)
def test_non_json_arguments_are_named(args: list[object], kwargs: dict, named: str) -> None:
    with pytest.raises(SerializationError, match=re.escape(named)) as info:
        encode_payload("mytask", args, kwargs)
    assert "'mytask'" in str(info.value)


@pytest.mark.parametrize("key", [1, 2.5, None, True])
def test_keyword_names_must_be_strings(key: object) -> None:
    """JSON would quietly turn these keys into strings; a task could never receive them."""
    with pytest.raises(SerializationError, match="keyword names must be strings"):
        encode_payload("t", [], {key: "v"})


@pytest.mark.parametrize("args", ["abc", b"abc", 5, {"a": 1}, None])
def test_args_must_be_a_list(args: object) -> None:
    with pytest.raises(SerializationError, match="args must be a list"):
        encode_payload("t", args, {})  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs", [[("a", 1)], "a", 3])
def test_kwargs_must_be_a_mapping(kwargs: object) -> None:
    with pytest.raises(SerializationError, match="kwargs must be an object"):
        encode_payload("t", [], kwargs)  # type: ignore[arg-type]


def test_payload_size_limit_counts_utf8_bytes() -> None:
    args_json, kwargs_json = encode_payload("t", ["é" * 10], {})
    size = len(args_json.encode()) + len(kwargs_json.encode())
    assert size == len('["') + 20 + len('"]') + len("{}")
    encode_payload("t", ["é" * 10], {}, limit=size)
    with pytest.raises(SerializationError, match=f"payload is {size} bytes.*limit of {size - 1}"):
        encode_payload("t", ["é" * 10], {}, limit=size - 1)


def test_default_payload_limit() -> None:
    assert DEFAULT_PAYLOAD_LIMIT == 1024 * 1024
    with pytest.raises(SerializationError, match="over the limit"):
        encode_payload("t", ["x" * DEFAULT_PAYLOAD_LIMIT], {})


def test_encode_result() -> None:
    assert encode_result({"a": [1]}) == '{"a":[1]}'
    assert encode_result(None) == "null"
    with pytest.raises(SerializationError, match="not JSON-serializable"):
        encode_result(object())
    with pytest.raises(SerializationError, match="not JSON-serializable"):
        encode_result(float("nan"))
    text = encode_result("é" * 10)
    size = len(text.encode())
    assert encode_result("é" * 10, limit=size) == text
    with pytest.raises(SerializationError, match=f"result is {size} bytes"):
        encode_result("é" * 10, limit=size - 1)


def test_dumps_refuses_nan() -> None:
    with pytest.raises(ValueError):
        dumps(float("nan"))


# ---- names.py ---------------------------------------------------------------------------
NAME_CHARS = "ABCXYZabcxyz0189_.-"


@pytest.mark.parametrize("name", ["a", "default", "email.high", "Q-1_x", "0", "a" * 127, ".-_"])
def test_valid_names(name: str) -> None:
    assert check_name("queue", name) == name


@pytest.mark.parametrize(
    "name",
    ["", "a" * 128, "has space", "a:b", "a=b", "a,b", "a/b", "é", "tab\t", "x\n", "a*", "q;"],
)
def test_invalid_names(name: str) -> None:
    with pytest.raises(ConfigError, match="invalid pool name") as info:
        check_name("pool", name)
    assert NAME_RULE in str(info.value)


@pytest.mark.parametrize("name", [None, 5, b"abc", ["a"]])
def test_names_must_be_strings(name: object) -> None:
    with pytest.raises(ConfigError, match="invalid task name"):
        check_name("task", name)


@given(st.text(max_size=140))
def test_name_rule_matches_its_description(name: str) -> None:
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
    valid = 1 <= len(name) <= 127 and set(name) <= allowed
    if valid:
        assert check_name("queue", name) == name
    else:
        with pytest.raises(ConfigError):
            check_name("queue", name)


@given(st.text(alphabet=NAME_CHARS, min_size=1, max_size=127))
def test_names_from_the_charset_are_valid(name: str) -> None:
    assert check_name("queue", name) == name
