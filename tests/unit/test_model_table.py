"""The concurrency models as classes in one table: what each accepts (and the exact words
of its refusals), the options each declares and how they are checked, and pool specs
checked against the table."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sluicegate import App, ConfigError
from sluicegate.worker.models import (
    MODELS,
    ModelOptionError,
    get_model,
    validate_model_options,
)
from sluicegate.worker.pool import PoolSpec, parse_pool_spec


@pytest.fixture
def app() -> Iterator[App]:
    app = App(broker="memory://")
    yield app
    app.close()


@pytest.fixture
def tasks(app: App) -> dict[str, Any]:
    @app.task
    def plain() -> None: ...

    @app.task
    async def coro() -> None: ...

    @app.task(transactional=True)
    def in_tx(connection: Any) -> None: ...

    @app.task(transactional=True)
    async def coro_in_tx(connection: Any) -> None: ...

    return app.tasks


# ---- the table ---------------------------------------------------------------------------


def test_the_table_holds_the_three_models_by_name() -> None:
    assert list(MODELS) == ["thread", "async", "process"]
    for name, model in MODELS.items():
        assert model.name == name
        assert get_model(name) is model


def test_an_unknown_model_lists_the_available_ones() -> None:
    with pytest.raises(ConfigError) as err:
        get_model("fibers")
    assert str(err.value) == "unknown model 'fibers' (available: thread, async, process)"
    with pytest.raises(ConfigError, match="unknown model 'fibers'"):
        validate_model_options("fibers", {})


# ---- what each model accepts ---------------------------------------------------------------


def test_thread_model_runs_plain_and_transactional_functions(tasks: dict[str, Any]) -> None:
    thread = MODELS["thread"]
    assert thread.refuses(tasks["plain"]) is None
    assert thread.refuses(tasks["in_tx"]) is None
    assert thread.refuses(tasks["coro"]) == (
        "task 'coro' is a coroutine function; it needs an async pool, not thread"
    )


def test_async_model_runs_coroutine_functions_only(tasks: dict[str, Any]) -> None:
    aio = MODELS["async"]
    assert aio.refuses(tasks["coro"]) is None
    assert aio.refuses(tasks["plain"]) == (
        "task 'plain' is a plain function; an async pool runs coroutine functions only"
    )
    assert aio.refuses(tasks["coro_in_tx"]) == (
        "task 'coro_in_tx' is transactional; transactional tasks run in thread pools"
    )


def test_process_model_runs_plain_functions_outside_transactions(
    tasks: dict[str, Any],
) -> None:
    process = MODELS["process"]
    assert process.refuses(tasks["plain"]) is None
    assert process.refuses(tasks["coro"]) == (
        "task 'coro' is a coroutine function; it needs an async pool, not process"
    )
    assert process.refuses(tasks["in_tx"]) == (
        "task 'in_tx' is transactional; transactional tasks run in thread pools"
    )


# ---- options -------------------------------------------------------------------------------


def test_only_the_process_model_runs_slots_in_child_processes() -> None:
    assert [name for name, model in MODELS.items() if model.child_processes] == ["process"]


def test_options_are_declared_as_data() -> None:
    declared = {o.name: (o.kind, o.minimum, o.default) for o in MODELS["process"].options}
    assert declared == {"max_jobs_per_child": (int, 1, 1000), "max_memory_mb": (float, 1, None)}
    assert all(o.help for o in MODELS["process"].options)
    assert MODELS["thread"].options == () and MODELS["async"].options == ()


def test_valid_options_come_back_with_defaults_filled_in() -> None:
    assert validate_model_options("process", {}) == {
        "max_jobs_per_child": 1000,
        "max_memory_mb": None,
    }
    assert validate_model_options("process", {"max_jobs_per_child": 5, "max_memory_mb": 1.5}) == {
        "max_jobs_per_child": 5,
        "max_memory_mb": 1.5,
    }
    assert validate_model_options("thread", {}) == {}


@pytest.mark.parametrize(
    ("options", "option", "problem"),
    [
        ({"max_jobs_per_child": 0}, "max_jobs_per_child", "must be an integer >= 1, not 0"),
        ({"max_jobs_per_child": 2.5}, "max_jobs_per_child", "must be an integer >= 1, not 2.5"),
        ({"max_jobs_per_child": True}, "max_jobs_per_child", "must be an integer >= 1, not True"),
        ({"max_memory_mb": "lots"}, "max_memory_mb", "must be a number >= 1, not 'lots'"),
        ({"max_memory_mb": 0.5}, "max_memory_mb", "must be a number >= 1, not 0.5"),
        (
            {"max_threads": 3},
            "max_threads",
            "unknown option (process pools have options: max_jobs_per_child, max_memory_mb)",
        ),
    ],
)
def test_bad_options_name_the_option_and_the_problem(
    options: dict[str, Any], option: str, problem: str
) -> None:
    with pytest.raises(ModelOptionError) as err:
        validate_model_options("process", options)
    assert (err.value.model, err.value.option, err.value.problem) == ("process", option, problem)
    assert str(err.value) == f"process model option {option!r}: {problem}"


def test_a_model_without_options_refuses_any() -> None:
    with pytest.raises(ModelOptionError) as err:
        validate_model_options("thread", {"max_jobs_per_child": 10})
    assert str(err.value) == (
        "thread model option 'max_jobs_per_child': unknown option (thread pools have no options)"
    )


# ---- pool specs against the table ------------------------------------------------------------


def test_pool_spec_checks_its_model_and_options() -> None:
    with pytest.raises(ConfigError) as err:
        PoolSpec("p", ("q",), 1, "fibers")
    assert str(err.value) == "pool 'p': unknown model 'fibers' (available: thread, async, process)"
    with pytest.raises(ConfigError) as err:
        PoolSpec("p", ("q",), 1, "process", options={"max_memory_mb": 0})
    assert str(err.value) == (
        "pool 'p': process model option 'max_memory_mb': must be a number >= 1, not 0"
    )
    with pytest.raises(ConfigError, match="malformed pool spec 'p=q:1:fibers'"):
        parse_pool_spec("p=q:1:fibers")


def test_pool_spec_options_are_the_models_own() -> None:
    spec = PoolSpec(
        "p", ("q",), 1, "process", options={"max_jobs_per_child": 200, "max_memory_mb": 512}
    )
    assert spec.options == {"max_jobs_per_child": 200, "max_memory_mb": 512}
    assert PoolSpec("p", ("q",), 1, "process").options["max_jobs_per_child"] == 1000
    # An option the pool's model does not declare is refused, naming pool and option.
    with pytest.raises(ConfigError, match=r"pool 'p'.*'max_jobs_per_child'.*thread pools"):
        PoolSpec("p", ("q",), 1, "thread", options={"max_jobs_per_child": 1000})
