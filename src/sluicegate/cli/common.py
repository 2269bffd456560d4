"""What every command shares: the --broker option, the error handling that turns expected
failures into one stderr line and an exit status, opening the app and its broker, JSON
arguments, and the retention options of `worker` and `prune`."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..app import BROKER_ENV, App, default_broker_url
from ..brokers.base import DAY, Retention
from ..config import Settings, load_settings
from ..errors import (
    BrokerUnavailable,
    ConfigError,
    InvalidTransition,
    JobNotFound,
    SluicegateError,
)
from ..loading import load_app

F = TypeVar("F", bound=Callable[..., Any])
EXIT_USAGE = 2
EXIT_FAILURE = 1

broker_option = click.option(
    "--broker",
    "broker_url",
    envvar=BROKER_ENV,
    default=None,
    metavar="URL",
    help="Broker URL: sqlite:///PATH (default sqlite:///sluicegate.db), "
    "postgresql://USER@HOST/DB?schema=NAME, memory://. "
    f"Also read from {BROKER_ENV}.",
)


def fail(message: str, code: int = EXIT_USAGE) -> None:
    click.echo(f"sluicegate: {message}", err=True)
    sys.exit(code)


def friendly_errors(fn: F) -> F:
    """Turn expected errors into one stderr line and an exit status, never a traceback:
    1 when the command could not be done (no such job, a refused change, the broker
    unavailable, busy or full just now), 2 for bad input or settings."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (JobNotFound, InvalidTransition, BrokerUnavailable) as exc:
            fail(str(exc), EXIT_FAILURE)
        except SluicegateError as exc:
            fail(str(exc), EXIT_USAGE)
        return None

    return wrapper  # type: ignore[return-value]


def group_broker() -> str | None:
    """``sluicegate --broker URL COMMAND`` works as well as ``sluicegate COMMAND --broker URL``."""
    ctx = click.get_current_context(silent=True)
    return ctx.find_root().params.get("broker_url") if ctx is not None else None


def open_app(broker_url: str | None, app: str | App | None = None, *, open_now: bool = True) -> App:
    """The app to act through: the user's (MODULE:APP, or loaded) with --broker replacing
    its broker, or a bare one. A bare app reads no settings file: it has no tasks for
    ``[tasks.NAME]`` to name. ``open_now``: open the broker here (a bad URL fails at once);
    the worker opens it itself (worker/startup.py). Inside a command the app is closed
    when the command ends, however it ends: its broker's connections do not outlive it."""
    broker_url = broker_url or group_broker()
    if app is None:
        app = App(broker=broker_url or default_broker_url(), config=False)
    else:
        app = load_app(app) if isinstance(app, str) else app
        if broker_url:
            app.use_broker(broker_url)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(app.close)
    if open_now:
        app.broker  # noqa: B018 - open now, so a bad URL fails here with a clear message
    return app


def load_configured_app(app_target: str, config_path: str | None) -> tuple[App, Settings]:
    """MODULE:APP with its settings applied: from --config FILE if given, else from the
    file the app itself would read (by default ./sluicegate.toml, else pyproject's
    [tool.sluicegate])."""
    app = load_app(app_target)
    if config_path is not None:
        app.use_config(config_path)
    applied = app.configure()  # the file the app read: the worker's settings come from it too
    return app, load_settings(applied.path) if applied.path is not None else Settings()


def parse_json(option: str, text: str | None, kind: type) -> Any:
    if text is None:
        return kind()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{option} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{option} is nested too deeply") from None
    if not isinstance(value, kind):
        expected = "an array" if kind is list else "an object"
        raise ConfigError(f"{option} must be {expected} in JSON, not {type(value).__name__}")
    return value


def retention_options(fn: F) -> F:
    """--keep-*-days options shared by `worker` and `prune`; defaults from ``Retention()``."""
    kept = sorted(Retention().by_state().items(), key=lambda item: item[0].value)
    for state, seconds in kept:
        fn = click.option(
            f"--keep-{state.value}-days",
            type=click.FloatRange(min=0),
            default=seconds / DAY,
            show_default=True,
            help=f"Delete {state.value} jobs this many days after they finished.",
        )(fn)
    return fn


def make_retention(succeeded: float, dead: float, cancelled: float) -> Retention:
    return Retention(succeeded=succeeded * DAY, dead=dead * DAY, cancelled=cancelled * DAY)
