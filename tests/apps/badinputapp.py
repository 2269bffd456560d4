"""Tasks that misbehave in every concurrency model, for the worker's bad-input tests
(imported by in-process workers, real ``sluicegate worker`` processes and process-pool
children alike).

One queue per model: ``bad_thread``, ``bad_async`` and ``bad_process``. Each model has the
same set of tasks, named ``<model>_<case>``: an exception whose ``__str__`` raises, results
that are not JSON (a set, NaN, a lone surrogate, 10,000 levels of nesting), an error
message with a lone surrogate or a NUL, a NUL in the result, SystemExit, KeyboardInterrupt
and BaseException; the process model also has a task that writes megabytes to stdout.
Every task has two attempts and no backoff, so a failure is retried once at once.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from typing import Any

from sluicegate import App
from sluicegate.codec import TOO_DEEP

app = App()

MODELS = ("thread", "async", "process")
ATTEMPTS = 2
SHOUT_MB = 8  # what p_shout writes to stdout (and a tenth of it to stderr)


class BadStr(Exception):
    """An exception that cannot say what it is."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ of BadStr raised")


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


def _raise(exc: BaseException) -> Callable[[], Any]:
    def body() -> Any:
        raise exc

    return body


NOT_JSON = "result is not JSON-serializable: "

# What each case does, and the (error type, error message) it ends with; None: succeeds.
CASES: dict[str, tuple[Callable[[], Any], tuple[str, str] | None]] = {
    "str_raises": (_raise(BadStr()), ("BadStr", "<exception str() failed>")),
    "set_result": (
        lambda: {1, 2},
        ("SerializationError", NOT_JSON + "Object of type set is not JSON serializable"),
    ),
    "nan_result": (
        lambda: float("nan"),
        ("SerializationError", NOT_JSON + "Out of range float values are not JSON compliant"),
    ),
    "surrogate_result": (
        lambda: "a\ud800b",
        ("SerializationError", NOT_JSON + "a string holds a lone surrogate (not valid Unicode)"),
    ),
    "deep_result": (
        lambda: _deep(10_000),
        ("SerializationError", NOT_JSON + TOO_DEEP),
    ),
    "surrogate_error": (
        _raise(ValueError("bad \udc80 text")),
        ("ValueError", "bad \\udc80 text"),  # stored with the surrogate escaped
    ),
    "nul_error": (_raise(ValueError("nul\x00here")), ("ValueError", "nul\x00here")),
    "nul_result": (lambda: "a\x00b", None),
    "system_exit": (_raise(SystemExit(3)), ("SystemExit", "3")),
    "keyboard_interrupt": (_raise(KeyboardInterrupt()), ("KeyboardInterrupt", "")),
    "base_exception": (_raise(BaseException("base")), ("BaseException", "base")),
}


def _register(model: str, case: str, body: Callable[[], Any]) -> None:
    name, queue = f"{model}_{case}", f"bad_{model}"
    if model == "async":

        async def run_async() -> Any:
            await asyncio.sleep(0)
            return body()

        run_async.__name__ = run_async.__qualname__ = name
        app.task(name=name, queue=queue, max_attempts=ATTEMPTS, backoff_base=0)(run_async)
    else:

        def run() -> Any:
            return body()

        run.__name__ = run.__qualname__ = name
        app.task(name=name, queue=queue, max_attempts=ATTEMPTS, backoff_base=0)(run)


for _model in MODELS:
    for _case, (_body, _) in CASES.items():
        _register(_model, _case, _body)


@app.task(queue="bad_thread")
def thread_ok(n: int) -> dict[str, Any]:
    return {"n": n, "pid": os.getpid()}


@app.task(queue="bad_async")
async def async_ok(n: int) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"n": n, "pid": os.getpid()}


@app.task(queue="bad_process")
def process_ok(n: int) -> dict[str, Any]:
    return {"n": n, "pid": os.getpid()}


@app.task(queue="bad_process", max_attempts=1)
def process_shout(megabytes: int = SHOUT_MB) -> int:
    """Write ``megabytes`` to stdout (and a tenth of that to stderr) from a pool child."""
    line = "x" * 1023 + "\n"
    for _ in range(megabytes * 1024):
        sys.stdout.write(line)
    for _ in range(megabytes * 1024 // 10):
        sys.stderr.write(line)
    sys.stdout.flush()
    return megabytes
