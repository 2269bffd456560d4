"""Tasks that overrun their deadline in each concurrency model (for the signals tests:
a timeout counts as a timeout whichever model enforced it)."""

from __future__ import annotations

import asyncio
import time

from sluicegate import App

app = App()


@app.task(queue="overrun_thread", timeout=0.2, max_attempts=1)
def overrun_thread() -> None:
    time.sleep(1.0)


@app.task(queue="overrun_process", timeout=0.3, max_attempts=1)
def overrun_process() -> None:
    time.sleep(5.0)


@app.task(queue="overrun_async", timeout=0.2, max_attempts=1)
async def overrun_async() -> None:
    await asyncio.sleep(5.0)
