"""Dependency limits without a broker: rates, declarations, the admission rule, and how an
app turns a task's limits and a call's arguments into a job's needs."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluicegate import App, ConfigError
from sluicegate.config import load_settings
from sluicegate.limits import (
    RECHECK,
    Bucket,
    Candidate,
    Limit,
    Need,
    admit,
    check_task_limits,
    decode_needs,
    encode_needs,
    format_rate,
    in_use_of,
    key_of,
    parse_rate,
    partition_value,
    refill,
)

T0 = 1_700_000_000.0  # an epoch-sized clock, as brokers have


# ---- rates ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "per_second"),
    [
        ("10/s", 10.0),
        ("600/m", 10.0),
        ("5/2s", 2.5),
        ("90/1.5m", 1.0),
        ("1000/h", 1000 / 3600),
        ("2/d", 2 / 86_400),
        (" 3 / s ", 3.0),
        ("1.5/s", 1.5),
    ],
)
def test_rates_parse(text: str, per_second: float) -> None:
    assert parse_rate(text) == pytest.approx(per_second)


@pytest.mark.parametrize(
    "bad", ["10", "10/x", "10/sec", "/s", "0/s", "-1/s", "10/0s", "ten/s", "", "10/s/s", 10, None]
)
def test_bad_rates_are_refused(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"rate must be starts per time like '10/s'") as err:
        parse_rate(bad)
    assert repr(bad) in str(err.value)


@pytest.mark.parametrize(
    ("per_second", "text"),
    [(10.0, "10/s"), (0.5, "30/m"), (2.5, "150/m"), (2 / 3600, "2/h"), (1 / 86_400, "1/d")],
)
def test_rates_format_in_their_shortest_exact_form(per_second: float, text: str) -> None:
    assert format_rate(per_second) == text
    assert parse_rate(text) == pytest.approx(per_second)


def test_a_rate_with_no_whole_form_formats_per_second() -> None:
    assert format_rate(1 / 7) == "0.142857/s"


# ---- declarations ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "limit 'db': give concurrency, rate, or both"),
        ({"concurrency": 0}, "limit 'db': concurrency must be an integer >= 1, not 0"),
        ({"concurrency": 1.5}, "limit 'db': concurrency must be an integer >= 1, not 1.5"),
        ({"concurrency": True}, "limit 'db': concurrency must be an integer >= 1, not True"),
        ({"rate": 0.0}, "limit 'db': rate must be > 0 starts per second"),
        ({"rate": -1.0}, "limit 'db': rate must be > 0 starts per second"),
        ({"rate": math.inf}, "limit 'db': rate must be > 0 starts per second"),
        ({"rate": math.nan}, "limit 'db': rate must be > 0 starts per second"),
        ({"concurrency": 2, "burst": 3}, "limit 'db': burst applies to a rate; give rate too"),
        ({"rate": 1.0, "burst": 0}, "limit 'db': burst must be an integer >= 1, not 0"),
        (
            {"concurrency": 1, "scope": "planet"},
            "limit 'db': scope must be one of global, host, not 'planet'",
        ),
        (
            {"concurrency": 1, "partition": "not-a-name"},
            "limit 'db': partition must name a keyword argument, not 'not-a-name'",
        ),
        (
            {"concurrency": 1, "partition": ""},
            "limit 'db': partition must name a keyword argument, not ''",
        ),
        (
            {"concurrency": 1, "partition": 5},
            "limit 'db': partition must name a keyword argument, not 5",
        ),
    ],
)
def test_limit_values_are_checked(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        Limit("db", **values)
    assert str(err.value) == message


def test_limit_names_follow_the_name_rule() -> None:
    with pytest.raises(ConfigError, match=r"invalid limit name 'a b'"):
        Limit("a b", concurrency=1)
    with pytest.raises(ConfigError, match=r"invalid limit name 7"):
        Limit(7, concurrency=1)  # type: ignore[arg-type]


def test_limit_of_reads_settings_values() -> None:
    assert Limit.of("api", rate="600/m", burst=5) == Limit("api", rate=10.0, burst=5)
    assert Limit.of("api", rate=5) == Limit("api", rate=5.0)
    assert isinstance(Limit.of("api", rate=5).rate, float)
    assert Limit.of("db", concurrency=2, scope=None).scope == "global"
    host = Limit.of("disk", concurrency=2, scope="host", partition="volume")
    assert (host.scope, host.partition) == ("host", "volume")
    with pytest.raises(ConfigError, match=r"rate must be starts per time"):
        Limit.of("api", rate=True)
    with pytest.raises(ConfigError, match=r"rate must be starts per time"):
        Limit.of("api", rate="fast")
    with pytest.raises(ConfigError) as err:
        Limit.of("db", concurrency=1, conccurrency=2)
    assert str(err.value) == (
        "limit 'db': unknown key 'conccurrency' (keys: burst, concurrency, partition, rate, scope)"
    )


def test_limit_capacity_description_and_dict() -> None:
    plain = Limit("db", concurrency=4)
    assert plain.capacity == 1 and plain.describe() == "4 at once, global"
    both = Limit.of("mail", concurrency=4, rate="10/s", burst=10, scope="host", partition="acct")
    assert both.capacity == 10
    assert both.describe() == "4 at once, 10/s (burst 10) per acct, host"
    assert both.to_dict() == {
        "name": "mail",
        "concurrency": 4,
        "rate": "10/s",
        "rate_per_s": 10.0,
        "burst": 10,
        "scope": "host",
        "partition": "acct",
    }
    assert Limit.of("api", rate="1/s").to_dict()["burst"] == 1  # the default burst, shown
    assert plain.to_dict()["rate"] is None and plain.to_dict()["burst"] is None


# ---- what a job needs ------------------------------------------------------------------
def test_task_limits_are_names_or_names_with_costs() -> None:
    assert check_task_limits(["db", "api"]) == (("api", 1), ("db", 1))
    assert check_task_limits(("db", "db")) == (("db", 1),)
    assert check_task_limits({"db": 2, "api": 1}) == (("api", 1), ("db", 2))
    assert check_task_limits(()) == ()
    for bad in ("db", 3, None):
        with pytest.raises(ConfigError, match="limits must be a list of limit names or a mapping"):
            check_task_limits(bad)
    with pytest.raises(ConfigError, match=r"the cost of 'db' must be an integer >= 1, not 0"):
        check_task_limits({"db": 0})
    with pytest.raises(ConfigError, match=r"the cost of 'db' must be an integer >= 1, not True"):
        check_task_limits({"db": True})
    with pytest.raises(ConfigError, match=r"invalid limit name 'no way'"):
        check_task_limits(["no way"])


def test_needs_encode_canonically() -> None:
    needs: list[Need] = [("db", None, 2), ("acct", "k1", 1)]
    text = encode_needs(needs)
    assert text == '[["acct","k1",1],["db",null,2]]'
    assert text == encode_needs(list(reversed(needs)))  # equal needs, equal text
    assert decode_needs(text) == (("acct", "k1", 1), ("db", None, 2))
    assert encode_needs([]) is None
    assert decode_needs(None) == () and decode_needs("") == ()


def test_partition_values() -> None:
    assert partition_value("acme") == "acme"
    assert partition_value(42) == "42"
    assert partition_value(True) == "true"
    assert partition_value({"b": 1, "a": [2, "x"]}) == '{"a":[2,"x"],"b":1}'
    with pytest.raises(ConfigError, match="must not be empty"):
        partition_value("")
    with pytest.raises(ConfigError, match="partition value must be JSON"):
        partition_value(object())


# ---- the admission rule ----------------------------------------------------------------
DB = Limit("db", concurrency=2)
API = Limit("api", concurrency=1)
LIMITS = {"db": DB, "api": API}


def cand(job_id: int, *needs: Need) -> Candidate:
    return Candidate(job_id, tuple(needs))


def test_jobs_without_needs_pass_up_to_n() -> None:
    out = admit([cand(i) for i in range(1, 6)], 3, {}, {}, {}, T0, "h")
    assert out.ids == [1, 2, 3] and out.retry_in is None and out.reasons == {}


def test_concurrency_admits_up_to_the_limit() -> None:
    out = admit([cand(i, ("db", None, 1)) for i in range(1, 5)], 10, LIMITS, {}, {}, T0, "h")
    assert out.ids == [1, 2]
    assert out.retry_in == RECHECK
    assert out.reasons[3] == "limit db: 2 of 2 in use"
    assert out.reasons[4] == "limit db: an earlier job waits for it"


def test_tokens_in_use_count() -> None:
    in_use = {("db", "", ""): 1}
    out = admit([cand(i, ("db", None, 1)) for i in range(1, 4)], 10, LIMITS, in_use, {}, T0, "h")
    assert out.ids == [1]


def test_costs_take_that_many_tokens() -> None:
    out = admit([cand(1, ("db", None, 2)), cand(2, ("db", None, 1))], 10, LIMITS, {}, {}, T0, "h")
    assert out.ids == [1] and out.reasons[2] == "limit db: 2 of 2 in use"
    api = {"api": Limit.of("api", rate="10/s", burst=4)}
    out = admit([cand(1, ("api", None, 3)), cand(2, ("api", None, 3))], 10, api, {}, {}, T0, "h")
    assert out.ids == [1] and out.buckets == {("api", "", ""): Bucket(1.0, T0)}
    assert out.retry_in == pytest.approx(0.2)


def test_a_blocked_key_keeps_the_order_of_its_waiters() -> None:
    """A job that would fit does not overtake an earlier one waiting for the same key,
    but jobs of other limits, or none, behind them still start."""
    in_use = {("db", "", ""): 1}
    cands = [
        cand(1, ("db", None, 2)),  # needs 2, only 1 free: waits
        cand(2, ("db", None, 1)),  # would fit, but stays behind job 1
        cand(3, ("api", None, 1)),
        cand(4),
    ]
    out = admit(cands, 10, LIMITS, in_use, {}, T0, "h")
    assert out.ids == [3, 4]
    assert out.reasons == {
        1: "limit db: 1 of 2 in use",
        2: "limit db: an earlier job waits for it",
    }


def test_a_job_needs_room_in_every_limit_and_takes_nothing_while_it_waits() -> None:
    in_use = {("db", "", ""): 2}  # db full, api free
    cands = [cand(1, ("api", None, 1), ("db", None, 1)), cand(2, ("api", None, 1))]
    out = admit(cands, 10, LIMITS, in_use, {}, T0, "h")
    assert out.ids == [2], "job 1 waits for db and holds no api token meanwhile"
    assert out.reasons[1] == "limit db: 2 of 2 in use"


def test_a_job_with_room_in_every_limit_takes_from_each() -> None:
    cands = [cand(1, ("api", None, 1), ("db", None, 1)), cand(2, ("api", None, 1))]
    out = admit(cands, 10, LIMITS, {}, {}, T0, "h")
    assert out.ids == [1]
    assert out.reasons[2] == "limit api: 1 of 1 in use"


def test_an_unknown_limit_holds_its_job_back_and_nothing_else() -> None:
    cands = [cand(1, ("ghost", None, 1)), cand(2, ("ghost", None, 1)), cand(3, ("db", None, 1))]
    out = admit(cands, 10, LIMITS, {}, {}, T0, "h")
    assert out.ids == [3]
    assert out.retry_in == RECHECK
    assert out.reasons[1] == "limit ghost is not registered (no worker declared it)"


def test_partitions_have_their_own_keys() -> None:
    acct = {"acct": Limit("acct", concurrency=1, partition="account")}
    cands = [cand(1, ("acct", "a", 1)), cand(2, ("acct", "a", 1)), cand(3, ("acct", "b", 1))]
    out = admit(cands, 10, acct, {}, {}, T0, "h")
    assert out.ids == [1, 3]
    assert out.reasons[2] == "limit acct[a]: 1 of 1 in use"


def test_host_scope_counts_only_the_claimers_host() -> None:
    disk = {"disk": Limit("disk", concurrency=1, scope="host"), "db": DB}
    held = [("disk", None, "a", 1), ("disk", None, "b", 1), ("db", None, "a", 1)]
    assert in_use_of(held, "a", disk) == {("disk", "", "a"): 1, ("db", "", ""): 1}
    assert in_use_of(held, "c", disk) == {("db", "", ""): 1}
    assert in_use_of([("gone", None, "a", 3)], "c", disk) == {("gone", "", ""): 3}
    assert key_of(disk["disk"], "disk", None, "a") == ("disk", "", "a")
    assert key_of(DB, "db", "p", "a") == ("db", "p", "")
    on_c = admit([cand(1, ("disk", None, 1))], 10, disk, in_use_of(held, "c", disk), {}, T0, "c")
    assert on_c.ids == [1]
    on_a = admit([cand(1, ("disk", None, 1))], 10, disk, in_use_of(held, "a", disk), {}, T0, "a")
    assert on_a.ids == []


def test_a_rate_takes_tokens_and_says_when_to_look_again() -> None:
    api = {"api": Limit.of("api", rate="10/s", burst=2)}
    cands = [cand(i, ("api", None, 1)) for i in range(1, 5)]
    out = admit(cands, 10, api, {}, {}, T0, "h")
    assert out.ids == [1, 2], "a new bucket starts full"
    assert out.buckets == {("api", "", ""): Bucket(0.0, T0)}
    assert out.retry_in == pytest.approx(0.1)
    assert out.reasons[3] == "limit api: rate 10/s, next start in 0.1 s"
    later = admit(cands[2:], 10, api, {}, out.buckets, T0 + 0.15, "h")
    assert later.ids == [3]
    assert later.buckets[("api", "", "")].tokens == pytest.approx(0.5, abs=1e-4)
    assert later.retry_in == pytest.approx(0.05, abs=1e-5)


def test_a_bucket_refilled_for_exactly_the_wait_admits() -> None:
    """Waiting the retry_in a claim gave is enough, on an epoch-sized clock too (where a
    tenth of a second is not exactly representable)."""
    api = {"api": Limit.of("api", rate="10/s")}
    spent = {("api", "", ""): Bucket(0.0, T0)}
    out = admit([cand(1, ("api", None, 1))], 10, api, {}, spent, T0 + 0.1, "h")
    assert out.ids == [1], out.reasons


def test_a_held_back_rate_job_spends_nothing() -> None:
    limits = {"api": Limit.of("api", rate="10/s", burst=3), "db": Limit("db", concurrency=1)}
    in_use = {("db", "", ""): 1}
    cands = [cand(1, ("api", None, 1), ("db", None, 1)), cand(2, ("api", None, 1))]
    out = admit(cands, 10, limits, in_use, {}, T0, "h")
    assert out.ids == [2]
    assert out.buckets == {("api", "", ""): Bucket(2.0, T0)}


def test_refill_starts_full_and_caps_at_the_burst() -> None:
    api = Limit.of("api", rate="10/s", burst=5)
    assert refill(None, api, T0) == Bucket(5.0, T0)
    assert refill(Bucket(0.0, T0), api, T0 + 0.25) == Bucket(2.5, T0 + 0.25)
    assert refill(Bucket(1.0, T0), api, T0 + 3600) == Bucket(5.0, T0 + 3600)
    assert refill(Bucket(1.0, T0), api, T0 - 10).tokens == 1.0  # a clock stepping back
    assert refill(None, Limit.of("one", rate="1/s"), T0).tokens == 1.0  # burst 1 by default


# ---- the app: declarations and needs ---------------------------------------------------
@pytest.fixture
def app() -> Iterator[App]:
    app = App(broker="memory://", config=False)
    yield app
    app.close()


def test_app_limit_declares_once(app: App) -> None:
    declared = app.limit("email", rate="10/s", burst=10, partition="account")
    assert declared == Limit("email", rate=10.0, burst=10, partition="account")
    assert app.limits == {"email": declared}
    assert app.limit("email", rate=10.0, burst=10, partition="account") == declared
    with pytest.raises(ConfigError, match="limit 'email' is declared twice, differently"):
        app.limit("email", rate="20/s", burst=10, partition="account")
    with pytest.raises(ConfigError, match="limit 'bad': burst applies to a rate"):
        app.limit("bad", concurrency=1, burst=2)


def test_an_undeclared_limit_is_an_error_at_configure(app: App) -> None:
    app.limit("cache", concurrency=2)

    @app.task(limits=["storage"])
    def upload() -> None: ...

    with pytest.raises(ConfigError) as err:
        app.configure()
    assert str(err.value) == (
        "task 'upload' uses limit 'storage', which is not declared: add "
        "app.limit('storage', ...) or [limits.storage] to the settings file (limits: cache)"
    )


def test_an_undeclared_limit_fails_every_enqueue_alike(app: App) -> None:
    """The first enqueue configures; a configure that failed is not half kept, so the next
    enqueue fails with the same error rather than a KeyError."""

    @app.task(limits=["storage"])
    def upload() -> None: ...

    for _ in range(2):
        with pytest.raises(ConfigError, match="uses limit 'storage', which is not declared"):
            upload.enqueue()
    assert app.broker.list_jobs() == []


def test_a_task_registered_after_configure_is_checked_at_once(app: App) -> None:
    app.configure()
    with pytest.raises(ConfigError, match=r"task 'late' uses limit 'db', which is not declared"):

        @app.task(limits=["db"])
        def late() -> None: ...


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        ({"concurrency": 2}, "task 't' costs 3 of limit 'db', whose concurrency is 2"),
        ({"rate": "1/s", "burst": 2}, "task 't' costs 3 of limit 'db', whose burst is 2"),
    ],
)
def test_a_cost_that_could_never_start_is_an_error(
    app: App, declare: dict[str, Any], message: str
) -> None:
    app.limit("db", **declare)

    @app.task(limits={"db": 3})
    def t() -> None: ...

    with pytest.raises(ConfigError, match=message + ": it could never start"):
        app.configure()


def test_jobs_store_their_needs(app: App) -> None:
    app.limit("db", concurrency=4)
    app.limit("api", rate="5/s")

    @app.task(limits={"db": 2, "api": 1})
    def report() -> None: ...

    @app.task
    def plain() -> None: ...

    job = report.enqueue()
    assert job.limits == (("api", None, 1), ("db", None, 2))
    assert app.get_job(job.id).limits == job.limits
    assert job.to_dict()["limits"] == [
        {"limit": "api", "partition": None, "cost": 1},
        {"limit": "db", "partition": None, "cost": 2},
    ]
    bare = plain.enqueue()
    assert bare.limits == () and bare.to_dict()["limits"] == []
    assert app.enqueue("report").limits == job.limits  # by name, too
    [by_many] = app.enqueue_many([("report", [], {})])
    assert by_many.limits == job.limits


def partitioned(app: App) -> Any:
    app.limit("mail", concurrency=1, partition="account")
    app.limit("quota", rate="1/s", partition="tenant")
    app.limit("db", concurrency=5)

    @app.task(limits=["mail", "quota", "db"])
    def send(to: str, account: Any, *, tenant: str) -> None: ...

    return send


def test_a_partition_parameter_left_out_takes_its_default(app: App) -> None:
    app.limit("mail", concurrency=1, partition="account")

    @app.task(limits=["mail"])
    def send(to: str, account: str = "shared") -> None: ...

    assert parts(send.enqueue("a@b")) == {"mail": "shared"}
    assert parts(send.enqueue("a@b", "acct-1")) == {"mail": "acct-1"}


def parts(job: Any) -> dict[str, str | None]:
    return {name: part for name, part, _ in job.limits}


def test_partition_from_keyword_and_positional_arguments(app: App) -> None:
    send = partitioned(app)
    by_keyword = send.enqueue("a@b", account="acme", tenant="t1")
    assert parts(by_keyword) == {"mail": "acme", "quota": "t1", "db": None}
    by_position = send.enqueue("a@b", "acme", tenant="t1")
    assert parts(by_position) == {"mail": "acme", "quota": "t1", "db": None}
    assert parts(send.enqueue("a@b", 42, tenant="t1"))["mail"] == "42"
    assert parts(send.enqueue(to="a@b", account={"id": 7}, tenant="t1"))["mail"] == '{"id":7}'
    [many] = app.enqueue_many([("send", ["x", "zeta"], {"tenant": "t2"})])
    assert parts(many) == {"mail": "zeta", "quota": "t2", "db": None}


def test_partition_from_limit_key(app: App) -> None:
    send = partitioned(app)
    both = send.with_options(limit_key="k9").enqueue("a@b", account="acme", tenant="t1")
    assert parts(both) == {"mail": "k9", "quota": "k9", "db": None}, "limit_key wins"
    one = send.with_options(limit_key={"mail": "m1"}).enqueue("a@b", tenant="t1")
    assert parts(one) == {"mail": "m1", "quota": "t1", "db": None}
    by_name = app.enqueue("send", ["a@b"], limit_key={"mail": "m2", "quota": "q2"})
    assert parts(by_name) == {"mail": "m2", "quota": "q2", "db": None}


def test_a_missing_partition_value_is_an_error(app: App) -> None:
    send = partitioned(app)
    with pytest.raises(ConfigError) as err:
        send.enqueue("a@b", tenant="t1")
    assert str(err.value) == (
        "task 'send': limit 'mail' is partitioned by 'account'; pass that argument or limit_key="
    )
    with pytest.raises(ConfigError, match="partitioned by 'tenant'"):
        send.with_options(limit_key={"mail": "m1"}).enqueue("a@b")
    with pytest.raises(ConfigError, match="must not be empty"):
        send.enqueue("a@b", account="", tenant="t1")
    assert app.broker.list_jobs() == []


def test_bad_limit_keys_are_refused(app: App) -> None:
    send = partitioned(app)
    for bad in ("", {"mail": ""}, {"mail": 5}, 5):
        with pytest.raises(ConfigError, match="limit_key must be a non-empty string or a mapping"):
            send.with_options(limit_key=bad).enqueue("a@b", account="x", tenant="t")


def test_limit_key_on_a_task_without_limits_is_an_error(app: App) -> None:
    @app.task
    def plain() -> None: ...

    with pytest.raises(ConfigError) as err:
        plain.with_options(limit_key="k").enqueue()
    assert str(err.value) == (
        "task 'plain': limit_key names no partitioned limit of the task "
        "(its partitioned limits: none)"
    )
    with pytest.raises(ConfigError, match="limit_key names no partitioned limit"):
        app.enqueue("not_registered_here", limit_key="k")
    assert app.broker.list_jobs() == []


def test_limit_key_on_a_task_without_partitioned_limits_is_an_error(app: App) -> None:
    app.limit("db", concurrency=2)

    @app.task(limits=["db"])
    def query() -> None: ...

    with pytest.raises(ConfigError, match="limit_key names no partitioned limit"):
        query.with_options(limit_key="k").enqueue()
    assert app.broker.list_jobs() == []


# ---- the settings file -----------------------------------------------------------------
def settings(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sluicegate.toml"
    path.write_text(text)
    return path


def test_settings_file_declares_limits(tmp_path: Path) -> None:
    path = settings(
        tmp_path,
        '[limits.storage]\nconcurrency = 4\nscope = "host"\n\n'
        '[limits.email]\nrate = "600/m"\nburst = 10\npartition = "account"\n',
    )
    app = App(broker="memory://", config=path)

    @app.task(limits=["storage", "email"])
    def upload(account: str) -> None: ...

    app.configure()
    assert app.limits == {
        "storage": Limit("storage", concurrency=4, scope="host"),
        "email": Limit("email", rate=10.0, burst=10, partition="account"),
    }
    job = upload.enqueue("acme")
    assert job.limits == (("email", "acme", 1), ("storage", None, 1))
    assert load_settings(str(path)).limits == app.limits  # the worker reads them too
    app.close()


def test_the_settings_file_wins_over_the_code(tmp_path: Path) -> None:
    app = App(broker="memory://", config=settings(tmp_path, "[limits.db]\nconcurrency = 2\n"))
    app.limit("db", concurrency=8)

    @app.task(limits=["db"])
    def q() -> None: ...

    app.configure()
    assert app.limits["db"] == Limit("db", concurrency=2)
    app.close()


def test_a_settings_file_limit_satisfies_a_task(tmp_path: Path) -> None:
    """A limit declared only in the file: configure() reads it before checking tasks."""
    app = App(broker="memory://", config=settings(tmp_path, "[limits.db]\nconcurrency = 3\n"))

    @app.task(limits={"db": 3})
    def q() -> None: ...

    assert q.enqueue().limits == (("db", None, 3),)
    app.close()


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        ("[limits.db]\nconcurrency = 2\nconc = 3\n", "limits.db.conc", "unknown key"),
        ("[limits.db]\nconcurrency = 0\n", "limits.db", "concurrency must be an integer >= 1"),
        ('[limits.db]\nrate = "fast"\n', "limits.db", "rate must be starts per time"),
        ('[limits.db]\nconcurrency = 1\nscope = "rack"\n', "limits.db", "scope must be one of"),
        ("[limits.db]\nburst = 2\nconcurrency = 1\n", "limits.db", "burst applies to a rate"),
        ('[limits]\ndb = "4"\n', "limits.db", "must be a table"),
        ('limits = "x"\n', "limits", "must be a table"),
    ],
)
def test_settings_file_limit_errors_name_file_and_key(
    tmp_path: Path, text: str, where: str, problem: str
) -> None:
    path = settings(tmp_path, text)
    app = App(broker="memory://", config=path)
    with pytest.raises(ConfigError) as err:
        app.configure()
    message = str(err.value)
    assert message.startswith(f"{path}: {where}: "), message
    assert problem in message


def test_a_task_override_keeps_the_tasks_limits(tmp_path: Path) -> None:
    """A [tasks.NAME] table that changes something else leaves the task's limits as they
    were (the override re-checks the task's options, limits included)."""
    path = settings(tmp_path, '[limits.db]\nconcurrency = 2\n\n[tasks.q]\nqueue = "other"\n')
    app = App(broker="memory://", config=path)

    @app.task(limits={"db": 2})
    def q() -> None: ...

    app.configure()
    assert (q.options.queue, q.options.costs) == ("other", (("db", 2),))
    assert q.enqueue().limits == (("db", None, 2),)
    app.close()


def test_a_task_override_may_set_limits(tmp_path: Path) -> None:
    path = settings(tmp_path, '[limits.db]\nconcurrency = 2\n\n[tasks.q]\nlimits = ["db"]\n')
    app = App(broker="memory://", config=path)

    @app.task
    def q() -> None: ...

    assert q.enqueue().limits == (("db", None, 1),)
    app.close()
