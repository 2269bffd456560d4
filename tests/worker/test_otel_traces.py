"""OpenTelemetry across processes: a traced producer (this process, the SDK's in-memory
exporter) and real ``sluicegate worker`` processes running tests/apps/otelapp.py (spans to
a file), in each pool model, on both brokers.

- Each enqueue makes one PRODUCER span, with the job id, and stores its ``traceparent``
  in the job's headers (single and bulk enqueue).
- Each attempt makes one CONSUMER span, linked to its job's producer span, with the
  messaging attributes (system, operation, queue, job id) and the task, attempt, pool and
  outcome: whether the job succeeds, fails, times out or is cancelled.
- A process pool's spans come from the child that ran the job; an attempt the worker
  ended by killing the child (timeout, cancel) gets its span from the worker.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import otelapp
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from sluicegate import App, Job, JobState
from sluicegate.otel import instrument
from support.brokers import over_brokers
from support.fleet import Fleet, enqueue, stop_all, wait_for

pytestmark = over_brokers

APP = "otelapp:app"
MODELS = {
    "thread": ("thr", (otelapp.thr_ok, otelapp.thr_fail, otelapp.thr_slow, otelapp.thr_wait)),
    "async": ("aio", (otelapp.aio_ok, otelapp.aio_fail, otelapp.aio_slow, otelapp.aio_wait)),
    "process": ("proc", (otelapp.proc_ok, otelapp.proc_fail, otelapp.proc_slow, otelapp.proc_wait)),
}
POOL_MODEL = {"thread": "thread", "async": "async", "process": "process"}


@pytest.fixture
def spans_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "spans.jsonl"
    monkeypatch.setenv("SG_SPANS", str(path))
    return path


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def traced(db_url: str, exporter: InMemorySpanExporter) -> Iterator[App]:
    """A producer App traced into ``exporter``."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = App(broker=db_url, config=False)
    instrument(app, tracer_provider=provider)
    yield app
    app.close()
    provider.shutdown()


def consumer_spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def of_job(spans: list[dict[str, Any]], job: Job) -> list[dict[str, Any]]:
    return [s for s in spans if s["attributes"].get("messaging.message.id") == str(job.id)]


def producer_of(exporter: InMemorySpanExporter, job: Job) -> ReadableSpan:
    [span] = [
        s
        for s in exporter.get_finished_spans()
        if (s.attributes or {}).get("messaging.message.id") == str(job.id)
    ]
    return span


def traceparent(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


@pytest.mark.parametrize("model", list(MODELS))
def test_producer_and_consumer_spans_are_linked_across_processes(
    model: str, traced: App, fleet: Fleet, exporter: InMemorySpanExporter, spans_file: Path
) -> None:
    pool, (ok, fail, slow, wait) = MODELS[model]
    worker = fleet.start([f"{pool}={pool}:2:{POOL_MODEL[model]}"], app=APP, lease=5.0)
    good, bad, late = (enqueue(traced, ok, 7), enqueue(traced, fail), enqueue(traced, slow))
    waiting = enqueue(traced, wait)
    wait_for(
        lambda: traced.get_job(waiting.id).state is JobState.RUNNING, timeout=60, what=fleet.logs
    )
    traced.cancel(waiting.id, by="otel-test")
    jobs = {"succeeded": good, "dead": bad, "timed_out": late, "stopped": waiting}
    wait_for(
        lambda: all(of_job(consumer_spans(spans_file), job) for job in jobs.values()),
        timeout=60,
        what=fleet.logs,
    )
    stop_all([worker])
    spans = consumer_spans(spans_file)

    for outcome, job in jobs.items():
        produced = producer_of(exporter, job)
        assert produced.kind is SpanKind.PRODUCER and produced.name == f"send {pool}"
        assert dict(produced.attributes or {}) == {
            "messaging.system": "sluicegate",
            "messaging.operation": "publish",
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": pool,
            "messaging.message.id": str(job.id),
            "sluicegate.task": job.task,
        }
        assert job.headers == {"traceparent": traceparent(produced)}
        assert traced.get_job(job.id).headers == job.headers

        [consumed] = of_job(spans, job)  # one attempt, one span
        context = produced.get_span_context()
        assert context is not None
        assert consumed["kind"] == "CONSUMER" and consumed["name"] == f"process {pool}"
        assert consumed["links"] == [
            {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}
        ]
        attributes = consumed["attributes"]
        assert attributes["messaging.system"] == "sluicegate"
        assert attributes["messaging.operation"] == "process"
        assert attributes["messaging.destination.name"] == pool
        assert attributes["sluicegate.task"] == job.task
        assert attributes["sluicegate.attempt"] == 1
        assert attributes["sluicegate.pool"] == pool
        assert attributes["sluicegate.outcome"] == outcome, consumed
        assert consumed["status"] == ("UNSET" if outcome == "succeeded" else "ERROR")
        # Where the span was made: the worker, a process pool's child, or (a killed child)
        # the worker that killed it.
        killed = model == "process" and outcome in ("timed_out", "stopped")
        if model == "process" and not killed:
            assert consumed["pid"] != worker.pid
        else:
            assert consumed["pid"] == worker.pid
        assert attributes.get("sluicegate.ended_by_worker", False) is killed
    assert traced.get_job(good.id).result == 7


def test_bulk_and_async_enqueues_each_get_their_own_producer_span(
    traced: App, exporter: InMemorySpanExporter
) -> None:
    import asyncio

    jobs = traced.enqueue_many([("anything", [i], {}) for i in range(3)])

    async def produce() -> list[Job]:
        try:
            one = await traced.enqueue_async("anything", [9])
            return [one, *await traced.enqueue_many_async([("anything", [10], {})])]
        finally:
            await traced.aclose()

    jobs += asyncio.run(produce())
    parents = {job.headers["traceparent"] for job in jobs}
    assert len(parents) == len(jobs) == 5
    for job in jobs:
        assert job.headers["traceparent"] == traceparent(producer_of(exporter, job))


def test_an_uninstrumented_app_stores_no_headers(producer: App) -> None:
    job = producer.enqueue("anything")
    assert job.headers == {} and producer.get_job(job.id).headers == {}
    assert not producer.hooks
