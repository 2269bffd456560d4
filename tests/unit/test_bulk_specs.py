"""``enqueue_many``'s specs (``App._specs``: a task's defaults worked out once per task
name, ``JobSpec.of_fields``) equal the one-job path's (``App._spec`` with no options),
and its errors are the same, raised at the same call."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sluicegate import App, ConfigError, SerializationError
from sluicegate.job import JobSpec
from sluicegate.task import NO_OPTIONS


def make_app() -> App:
    app = App("memory://", config=False)
    app.limit("db", concurrency=2, partition="user")

    @app.task
    def plain(x: Any = None) -> None: ...

    @app.task(queue="mail", priority=-4, max_attempts=9, expires_in=60)
    def mail(to: str, *, body: str = "") -> None: ...

    @app.task(limits=["db"])
    def limited(user: str) -> None: ...

    @app.enqueue_headers
    def trace(task: str, queue: str) -> dict[str, str]:
        return {"t": task, "q": queue}

    return app


def test_bulk_specs_equal_one_by_one_specs() -> None:
    app = make_app()
    calls: list[tuple[str, Any, Any]] = [
        ("plain", [1], {}),
        ("mail", ("a@b",), {"body": "é\u0000"}),
        ("limited", ["u1"], {}),
        ("unregistered", [], None),
        ("plain", None, {"x": [1.5, None, {"k": True}]}),
        ("mail", ["c@d"], {}),
        ("limited", [], {"user": "u2"}),
    ]
    bulk = list(app._specs(calls))
    single = [app._spec(name, args, kwargs, NO_OPTIONS) for name, args, kwargs in calls]
    assert bulk == single
    for spec in bulk:
        assert isinstance(spec, JobSpec)
        assert dataclasses.replace(spec) == spec
    assert hash(bulk[1]) == hash(single[1])


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (("no such name!", [], {}), ConfigError),
        (("plain", [object()], {}), SerializationError),
        (("plain", "text", {}), SerializationError),
        (("limited", [], {}), ConfigError),
    ],
)
def test_bulk_specs_fail_as_the_one_by_one_path_does(bad: Any, error: type) -> None:
    app = make_app()
    calls = [("plain", [0], {}), bad, ("plain", [2], {})]
    with pytest.raises(error) as bulk:
        list(app._specs(calls))
    with pytest.raises(error) as single:
        for name, args, kwargs in calls:
            app._spec(name, args, kwargs, NO_OPTIONS)
    assert str(bulk.value) == str(single.value)
