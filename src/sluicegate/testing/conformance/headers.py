"""Job headers (``Job.headers``): string pairs stored with a job at enqueue (the trace
context travels here), read back alike by the enqueue's result, a claim, every read and
the async enqueue; none by default; kept by a retry, and by a unique key's existing job."""

from __future__ import annotations

from ...brokers.base import Broker
from ...job import Job, encode_headers
from ...outcomes import Retried
from .async_producers import run
from .helpers import BOOM, LEASE, S, get, put, spec, suite, take

TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


class TestHeaders:
    def test_none_by_default(self, broker: Broker) -> None:
        job = put(broker)
        assert job.headers == {}
        assert get(broker, job.id).headers == {}
        assert take(broker).job.headers == {}
        assert get(broker, job.id).to_dict()["headers"] == {}

    def test_stored_and_read_back_by_every_read(self, broker: Broker) -> None:
        more = {**TRACE, "tracestate": "vendor=1", "é": "ü\u2028"}
        job = put(broker, headers=encode_headers(more))
        assert job.headers == more
        assert get(broker, job.id).headers == more
        assert [j.headers for j in broker.list_jobs(S.READY, "q", 10)] == [more]
        claimed = take(broker)
        assert claimed.job.headers == more
        assert get(broker, job.id).to_dict()["headers"] == more

    def test_bulk_enqueue_keeps_each_jobs_own(self, broker: Broker) -> None:
        specs = [spec(headers=encode_headers({"n": str(i)}) if i % 2 else None) for i in range(5)]
        jobs = broker.enqueue(specs)
        assert [j.headers for j in jobs] == [{"n": str(i)} if i % 2 else {} for i in range(5)]
        claimed = broker.claim(["q"], 5, LEASE, "w1")
        assert sorted((c.job.id, c.job.headers) for c in claimed) == [
            (j.id, j.headers) for j in jobs
        ]

    def test_a_retry_keeps_them(self, broker: Broker) -> None:
        job = put(broker, headers=encode_headers(TRACE))
        claimed = take(broker)
        broker.record((), [Retried(claimed.claim, BOOM, 0.0)])
        assert get(broker, job.id).headers == TRACE
        broker.cancel(job.id)
        broker.retry(job.id)  # an operator's retry: a fresh budget, the same headers
        assert get(broker, job.id).headers == TRACE

    def test_a_unique_keys_existing_job_keeps_its_own(self, broker: Broker) -> None:
        first = put(broker, unique_key="k", headers=encode_headers(TRACE))
        again = put(broker, unique_key="k", headers=encode_headers({"traceparent": "other"}))
        assert again.id == first.id and again.headers == TRACE

    def test_async_enqueue_stores_them_too(self, broker: Broker) -> None:
        async def enqueue() -> list[Job]:
            return await broker.enqueue_async([spec(headers=encode_headers(TRACE))])

        [job] = run(broker, enqueue)
        assert job.headers == TRACE
        assert get(broker, job.id).headers == TRACE


__all__ = suite(globals())
