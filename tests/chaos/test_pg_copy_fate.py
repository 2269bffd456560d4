"""A bulk enqueue by COPY (brokers/postgres/copyin.py) that loses its connection: before
its COMMIT went out, nothing was stored (BrokerUnavailable); once it went out, the fate is
unknown (EnqueueFateUnknown naming the jobs without a unique key), whatever the server
did. Through the loopback proxy (tests/apps/tcpproxy.py), on a real server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from tcpproxy import TcpProxy

from sluicegate import App, BrokerUnavailable, EnqueueFateUnknown
from sluicegate.brokers.postgres.copyin import COPY_MIN
from support.brokers import only_postgresql, rewrite
from support.fleet import wait_for

pytestmark = only_postgresql

BATCH = COPY_MIN * 3


@pytest.fixture
def proxy(db_url: str) -> Iterator[TcpProxy]:
    parts = urlsplit(db_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    yield proxy
    proxy.close()


def stored(reader: App, marker: str) -> int:
    return sum(1 for j in reader.broker.list_jobs(limit=10 * BATCH) if j.args[:1] == [marker])


def test_a_copy_cut_before_its_commit_stored_nothing(
    db_url: str, proxy: TcpProxy, producer: App
) -> None:
    app = App(broker=rewrite(db_url, port=proxy.port, call_timeout="1"))
    try:
        app.enqueue("t", args=["warm"])  # the pool holds a live connection now
        proxy.blackhole(new_connections=True)
        started = time.monotonic()
        with pytest.raises(BrokerUnavailable) as caught:
            app.enqueue_many(("t", ["cut", i], {}) for i in range(BATCH))
        assert type(caught.value) is BrokerUnavailable, caught.value
        assert "nothing was stored" in str(caught.value), caught.value  # BEGIN went out
        assert time.monotonic() - started < 1.0 + 0.75
        proxy.restore()
        time.sleep(1.0)  # whatever waited in the proxy has reached the server by now
        assert stored(producer, "cut") == 0
    finally:
        proxy.restore()
        app.close()


@pytest.mark.parametrize("fate", ["lost", "committed"])
def test_a_copy_whose_commit_answer_never_comes_has_an_unknown_fate(
    fate: str, db_url: str, proxy: TcpProxy, producer: App
) -> None:
    app = App(broker=rewrite(db_url, port=proxy.port, call_timeout="2"))
    marker = f"copy-fate-{fate}"
    try:
        app.enqueue("t", args=["warm"])
        proxy.fail_commits([fate], marker.encode())
        with pytest.raises(EnqueueFateUnknown) as caught:
            app.enqueue_many(("t", [marker, i], {}) for i in range(BATCH))
        exc = caught.value
        assert exc.unique_keys == (None,) * BATCH and not exc.retry_is_safe
        assert f"the {BATCH} jobs" in str(exc) and "may be stored twice" in str(exc)
        expected = BATCH if fate == "committed" else 0
        wait_for(lambda: stored(producer, marker) == expected, timeout=10, what="the fate")
    finally:
        proxy.restore()
        app.close()
