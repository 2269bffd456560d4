"""OpenTelemetry tracing, built on the app's hooks (the ``sluicegate[otel]`` extra;
docs/tracing.md).

``instrument(app)`` registers hooks: each enqueue starts a PRODUCER span and stores its
W3C ``traceparent`` in the job's headers; each attempt gets a CONSUMER span, where the
attempt runs, linked to that producer span and ended with the attempt's outcome. An app
that is not instrumented imports nothing of OpenTelemetry and pays nothing.

The attribute names follow OpenTelemetry's messaging semantic conventions; they are
written out here rather than imported, as the Python package still ships them as
incubating (and renames them between releases).
"""

from __future__ import annotations

import collections
import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .context import current_job
from .hooks import HookOutcome, Stopped, outcome_name
from .outcomes import Buried, Retried, Settled, Succeeded

if TYPE_CHECKING:
    from .app import App
    from .job import Job

SYSTEM = "sluicegate"
TRACER = "sluicegate"
PENDING_LIMIT = 10_000  # producer spans awaiting their stored job (a failed enqueue's stay)

# Messaging semantic conventions (and the older ``messaging.operation`` many backends read).
MESSAGING_SYSTEM = "messaging.system"
OPERATION = "messaging.operation"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
DESTINATION = "messaging.destination.name"
MESSAGE_ID = "messaging.message.id"
CONSUMER_GROUP = "messaging.consumer.group.name"
ERROR_TYPE = "error.type"
# sluicegate's own.
TASK = "sluicegate.task"
ATTEMPT = "sluicegate.attempt"
POOL = "sluicegate.pool"
OUTCOME = "sluicegate.outcome"
ENDED_BY_WORKER = "sluicegate.ended_by_worker"  # the attempt's own span died with it

_propagator = TraceContextTextMapPropagator()
_instrumented: weakref.WeakKeyDictionary[App, Tracing] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def instrument(app: App, tracer_provider: trace.TracerProvider | None = None) -> Tracing:
    """Trace ``app``'s enqueues and attempts (once per app: a second call returns the
    first's ``Tracing``). Call it where the app is made, at import time, so workers and
    process-pool children, which import the app, trace too. ``tracer_provider``: None
    uses the global one (``opentelemetry.trace.set_tracer_provider``)."""
    with _lock:
        found = _instrumented.get(app)
        if found is not None:
            return found
        tracing = Tracing(trace.get_tracer(TRACER, tracer_provider=tracer_provider))
        hooks = app.hooks
        hooks.add("enqueue_headers", tracing.enqueue_headers)
        hooks.add("on_enqueue", tracing.on_enqueue)
        hooks.add("before_job", tracing.before_job)
        hooks.add("after_job", tracing.after_job)
        _instrumented[app] = tracing
        return tracing


class Tracing:
    """The spans of one instrumented app: producer spans until their job is stored,
    consumer spans while their attempt runs (by job id and attempt)."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer
        self._lock = threading.Lock()
        self._pending: collections.OrderedDict[str, trace.Span] = collections.OrderedDict()
        self._running: dict[tuple[int, int], tuple[trace.Span, object, int]] = {}

    # ---- producer ----------------------------------------------------------------------
    def enqueue_headers(self, task: str, queue: str) -> dict[str, str] | None:
        """Start the job's PRODUCER span (a child of the caller's current span) and hand
        its trace context to the broker as the job's ``traceparent`` header."""
        span = self.tracer.start_span(
            f"send {queue}",
            kind=SpanKind.PRODUCER,
            attributes={
                MESSAGING_SYSTEM: SYSTEM,
                OPERATION: "publish",
                OPERATION_TYPE: "send",
                OPERATION_NAME: "send",
                DESTINATION: queue,
                TASK: task,
            },
        )
        carrier: dict[str, str] = {}
        _propagator.inject(carrier, context=trace.set_span_in_context(span))
        if not span.is_recording():
            return carrier or None  # no SDK: pass on the caller's context, if any
        parent = carrier.get("traceparent")
        if parent is None:
            span.end()
            return None
        with self._lock:
            self._pending[parent] = span
            while len(self._pending) > PENDING_LIMIT:  # enqueues that failed: end them
                _, stale = self._pending.popitem(last=False)
                stale.end()
        return carrier

    def on_enqueue(self, job: Job) -> None:
        """The broker stored the job: its producer span gets the job id and ends."""
        parent = job.headers.get("traceparent")
        if parent is None:
            return
        with self._lock:
            span = self._pending.pop(parent, None)
        if span is not None:
            span.set_attribute(MESSAGE_ID, str(job.id))
            span.end()

    # ---- consumer ----------------------------------------------------------------------
    def before_job(self, job: Job) -> None:
        """Start the attempt's CONSUMER span, linked to the enqueue's span, and make it
        current for the task (its own spans are children of it)."""
        span = self._consumer_span(job)
        token = otel_context.attach(trace.set_span_in_context(span))
        with self._lock:
            self._running[(job.id, job.attempts)] = (span, token, threading.get_ident())

    def after_job(self, job: Job, outcome: HookOutcome) -> None:
        """End the attempt's span with its outcome. An attempt whose span died with its
        process (a killed child) gets a span here, where the worker ended it."""
        with self._lock:
            entry = self._running.pop((job.id, job.attempts), None)
        if entry is None:
            span = self._consumer_span(job)
            span.set_attribute(ENDED_BY_WORKER, True)
        else:
            span, token, thread = entry
            if thread == threading.get_ident():  # a thread's timeout ends it elsewhere
                otel_context.detach(token)  # type: ignore[arg-type]
        _record_outcome(span, outcome)
        span.end()

    def _consumer_span(self, job: Job) -> trace.Span:
        attributes: dict[str, Any] = {
            MESSAGING_SYSTEM: SYSTEM,
            OPERATION: "process",
            OPERATION_TYPE: "process",
            OPERATION_NAME: "process",
            DESTINATION: job.queue,
            MESSAGE_ID: str(job.id),
            TASK: job.task,
            ATTEMPT: job.attempts,
        }
        pool = _pool()
        if pool is not None:
            attributes[POOL] = attributes[CONSUMER_GROUP] = pool
        producer = _producer_context(job.headers)
        return self.tracer.start_span(
            f"process {job.queue}",
            context=otel_context.Context(),  # a trace of its own, linked to the enqueue's
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=[Link(producer)] if producer is not None else None,
        )


def _pool() -> str | None:
    try:
        return current_job().pool
    except RuntimeError:
        return None


def _producer_context(headers: Mapping[str, str]) -> trace.SpanContext | None:
    if "traceparent" not in headers:
        return None
    found = trace.get_current_span(_propagator.extract(headers)).get_span_context()
    return found if found.is_valid else None


def _record_outcome(span: trace.Span, outcome: HookOutcome) -> None:
    span.set_attribute(OUTCOME, outcome_name(outcome))
    report = outcome.report if isinstance(outcome, Stopped) else outcome
    if isinstance(outcome, Succeeded) or (isinstance(outcome, Settled) and not outcome.lease_lost):
        return
    if isinstance(report, Retried | Buried):
        span.set_attribute(ERROR_TYPE, report.error.type)
        span.set_status(Status(StatusCode.ERROR, str(report.error)))
    else:  # stopped after it succeeded, or a transactional commit refused
        span.set_attribute(ERROR_TYPE, outcome_name(outcome))
        span.set_status(Status(StatusCode.ERROR, "stopped: cancelled, or its lease lost"))
