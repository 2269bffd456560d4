"""Import an App by ``MODULE:APP`` and find that path again for an App object.

Process pools need the path: their children are fresh interpreters that import the
app themselves (nothing is pickled across; job payloads stay JSON).
"""

from __future__ import annotations

import importlib
import os
import sys

from .app import App
from .errors import ConfigError


def load_app(target: str) -> App:
    """Import ``MODULE:APP`` (the current folder is importable, as with python -m)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"app must be given as MODULE:APP, not {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import app module {module_name!r}: {exc}") from None
    app = getattr(module, attr, None)
    if not isinstance(app, App):
        raise ConfigError(f"{target!r} is not a sluicegate App (found {type(app).__name__})")
    app.import_path = target
    return app


def app_path(app: App) -> str:
    """``MODULE:APP`` for an imported app: the path it was loaded by, or a module holding it."""
    if app.import_path:
        return app.import_path
    for name, module in list(sys.modules.items()):
        if name == "__main__" or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if value is app:
                return f"{name}:{attr}"
    raise ConfigError(
        "process pools need the app importable as MODULE:APP (define it in a module, "
        "not in __main__, or run the worker with `sluicegate worker MODULE:APP`)"
    )
