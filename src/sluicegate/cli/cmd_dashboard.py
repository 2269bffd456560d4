"""`sluicegate dashboard`: the web dashboard on this machine (the optional extra
``sluicegate[dashboard]``). It binds to loopback; any other address needs a token, and
without one the command refuses to start."""

from __future__ import annotations

import click

from ..errors import ConfigError
from .common import broker_option, fail, friendly_errors, open_app

TOKEN_ENV = "SLUICEGATE_DASHBOARD_TOKEN"


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8420, show_default=True, help="Port."
)
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    default=None,
    metavar="TOKEN",
    help=f"Require this token (sign-in form, or Authorization: Bearer). Required to bind "
    f"anywhere but loopback. Also read from {TOKEN_ENV} (better: not shown by ps).",
)
@click.option("--read-only", is_flag=True, help="Hide and refuse every action.")
@click.option("--title", default="sluicegate", show_default=True, help="The page title.")
@broker_option
@friendly_errors
def dashboard(
    host: str,
    port: int,
    token: str | None,
    read_only: bool,
    title: str,
    broker_url: str | None,
) -> None:
    """Serve the web dashboard: queues, pools, workers, limits and jobs, live.

    \b
    sluicegate dashboard                          # http://127.0.0.1:8420/
    SLUICEGATE_DASHBOARD_TOKEN=... sluicegate dashboard --host 0.0.0.0
    """
    try:
        import uvicorn

        from ..dashboard import asgi_app
        from ..dashboard.security import LOOPBACK_NAMES, is_loopback, token_problem
    except ImportError as exc:
        fail(
            f"the dashboard needs its extra ({exc.name} is not installed): "
            "pip install 'sluicegate[dashboard]'"
        )
        return
    token = token or None
    if token is not None and (problem := token_problem(token)):
        raise ConfigError(problem)
    loopback = is_loopback(host)
    if not loopback and token is None:
        raise ConfigError(
            f"refusing to serve the dashboard on {host} without a token: anyone who can "
            f"reach it could read job data and act on jobs. Give --token or set {TOKEN_ENV}, "
            "or bind to 127.0.0.1"
        )
    app = open_app(broker_url)
    # On loopback without a token, only loopback Host headers: a page on another site
    # must not reach the dashboard by pointing its own name at 127.0.0.1.
    hosts = [*LOOPBACK_NAMES, host] if loopback and token is None else None
    asgi = asgi_app(app, read_only=read_only, token=token, title=title, allowed_hosts=hosts)
    shown = f"[{host}]" if ":" in host else host
    click.echo(
        f"sluicegate dashboard on http://{shown}:{port}/ "
        f"({'read-only, ' if read_only else ''}{'token required' if token else 'no token'}); "
        f"Ctrl-C stops it",
        err=True,
    )
    try:
        uvicorn.run(asgi, host=host, port=port, log_level="warning", server_header=False)
    finally:
        app.close()
