"""The web dashboard (``pip install 'sluicegate[dashboard]'``): queues, pools, workers,
limits and jobs of one broker, with retry, cancel and limit changes. Run it with
``sluicegate dashboard``, or mount ``asgi_app(...)`` inside your own ASGI project.

Nothing in sluicegate's core imports this package: Starlette, Jinja2 and uvicorn are
needed only here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from ..app import App
    from ..brokers import Broker

EXTRA = "pip install 'sluicegate[dashboard]'"
NEEDS = ("starlette", "jinja2", "markupsafe", "uvicorn")


def asgi_app(
    app_or_broker: App | Broker | str,
    *,
    read_only: bool = False,
    token: str | None = None,
    title: str = "sluicegate",
    secret: str | bytes | None = None,
    allowed_hosts: Iterable[str] | None = None,
) -> Starlette:
    """The dashboard as an ASGI app, for an App, a Broker or a broker URL.

    Mount it under any prefix (every link follows the ``root_path`` it is served at),
    behind your own authentication; or give ``token`` to require one. ``read_only``
    hides and refuses every action. ``secret`` signs the CSRF fields and cookies: by
    default derived from ``token``, else random per process, so give one when several
    processes serve the dashboard without a token. ``allowed_hosts`` refuses requests
    whose Host header names another host (None: any). A ``token`` that is empty (an
    environment variable set to nothing, say) or shorter than 16 characters is a
    ValueError: it must never turn the sign-in off, or guard it weakly, without a word.

        from sluicegate.dashboard import asgi_app
        app.mount("/jobs", asgi_app(my_app, read_only=True))   # FastAPI / Starlette
    """
    try:
        from .app import build
    except ImportError as exc:  # only a missing extra; anything else is a bug to see
        if exc.name not in NEEDS:
            raise
        raise ImportError(f"the dashboard needs its extra: {EXTRA}", name=exc.name) from exc
    if token is not None:
        from .security import token_problem

        if not isinstance(token, str):
            raise ValueError(f"the dashboard token must be a string or None, not {token!r}")
        if problem := token_problem(token):
            raise ValueError(problem)
    return build(
        app_or_broker,
        read_only=read_only,
        token=token,
        title=title,
        secret=secret,
        allowed_hosts=allowed_hosts,
    )


__all__ = ["EXTRA", "asgi_app"]
