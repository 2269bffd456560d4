"""A web app's lifespan around an App: ``await app.open_async()`` at startup opens the
broker and applies the settings (a bad broker URL fails there, not at the first request);
``await app.aclose()`` at shutdown stops the waiting hub too (its thread, its
subscription), and a waiter still waiting gets an error rather than hanging."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from sluicegate import App, ConfigError, SluicegateError


def hub_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "sluicegate-waits"]


def test_open_async_opens_the_broker_and_aclose_stops_the_waiting_hub(db_url: str) -> None:
    app = App(broker=db_url, config=False)

    @app.task(queue="never-served")
    def idle() -> None: ...

    async def lifespan() -> None:
        await app.open_async()
        assert app._broker is not None and app._settings is not None  # opened, configured
        job = await idle.enqueue_async()
        with pytest.raises(TimeoutError):
            await job.wait_async(timeout=0.05)
        assert len(hub_threads()) == 1
        waiting = asyncio.ensure_future(job.wait_async(timeout=30))
        await asyncio.sleep(0.05)
        await app.aclose()
        with pytest.raises(SluicegateError, match="app was closed while waiting"):
            await waiting
        assert hub_threads() == []
        again = await app.get_job_async(job.id)  # usable again: the broker reopens
        assert again.state.value == "ready"
        await app.aclose()

    before = len(hub_threads())
    asyncio.run(lifespan())
    assert len(hub_threads()) == before == 0


def test_open_async_fails_at_startup_for_a_bad_broker(tmp_path: Path) -> None:
    app = App(broker="nosuch://x", config=False)
    with pytest.raises(ConfigError, match="unknown broker URL scheme 'nosuch'"):
        asyncio.run(app.open_async())
