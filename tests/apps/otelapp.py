"""An app traced with sluicegate.otel, for real ``sluicegate worker`` processes (and the
process pool's children, which import this app and so set up their own tracing).

Finished spans go, one JSON line each, to the file named by ``SG_SPANS`` through a
SimpleSpanProcessor (exported as each span ends, so a child killed a moment later has
written its spans already). Per model (queues ``thr``, ``aio``, ``proc``): ``*_ok``
returns its argument, ``*_fail`` raises (one attempt: dead), ``*_slow`` runs past its
0.5 s timeout, ``*_wait`` runs until cancelled (at most 30 s).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from sluicegate import App
from sluicegate.context import current_job
from sluicegate.otel import instrument


class FileSpanExporter(SpanExporter):
    """Appends each span as one JSON line (one write, O_APPEND: processes never interleave)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            context = span.get_span_context()
            assert context is not None
            line = {
                "pid": os.getpid(),
                "name": span.name,
                "kind": span.kind.name,
                "trace_id": f"{context.trace_id:032x}",
                "span_id": f"{context.span_id:016x}",
                "links": [
                    {
                        "trace_id": f"{link.context.trace_id:032x}",
                        "span_id": f"{link.context.span_id:016x}",
                    }
                    for link in span.links
                ],
                "attributes": dict(span.attributes or {}),
                "status": span.status.status_code.name,
            }
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (json.dumps(line) + "\n").encode())
            finally:
                os.close(fd)
        return SpanExportResult.SUCCESS


provider = TracerProvider()
if os.environ.get("SG_SPANS"):
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(os.environ["SG_SPANS"])))

app = App(config=False)
instrument(app, tracer_provider=provider)
ONE = {"max_attempts": 1}


@app.task(queue="thr")
def thr_ok(x: Any) -> Any:
    return x


@app.task(queue="thr", **ONE)  # type: ignore[arg-type]
def thr_fail() -> None:
    raise ValueError("thread task fails")


@app.task(queue="thr", timeout=0.5, max_attempts=1)
def thr_slow() -> str:
    time.sleep(1.5)
    return "late"


@app.task(queue="thr")
def thr_wait() -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        current_job().raise_if_cancelled()
        time.sleep(0.02)


@app.task(queue="aio")
async def aio_ok(x: Any) -> Any:
    return x


@app.task(queue="aio", **ONE)  # type: ignore[arg-type]
async def aio_fail() -> None:
    raise ValueError("async task fails")


@app.task(queue="aio", timeout=0.5, max_attempts=1)
async def aio_slow() -> None:
    await asyncio.sleep(30)


@app.task(queue="aio")
async def aio_wait() -> None:
    await asyncio.sleep(30)


@app.task(queue="proc")
def proc_ok(x: Any) -> Any:
    return x


@app.task(queue="proc", **ONE)  # type: ignore[arg-type]
def proc_fail() -> None:
    raise ValueError("process task fails")


@app.task(queue="proc", timeout=0.5, max_attempts=1)
def proc_slow() -> None:
    time.sleep(30)


@app.task(queue="proc")
def proc_wait() -> None:
    time.sleep(30)
