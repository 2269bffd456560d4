"""What expiry costs the claim, on SQLite. Prints figures; asserts nothing.

    .venv/bin/python bench/expiry_claim.py [--jobs N] [--batch B] [--repeat R] [--sync MODE]

Per case, a fresh temporary SQLite file holds N ready no-op jobs; one handle then claims
them B at a time and acks each batch (one record write), until none is left: jobs/s over
the drain, the median of R runs. ``--sync off`` (SQLite's ``synchronous``) takes the
fsync of each ack out, leaving the statements' own cost, which is what expiry changes;
the default, ``full``, is what a worker pays. Cases:

- ``plain``: no job has an expiry (the common case: what every claim now also pays is
  one seek of the empty jobs_expiring index and a filter on rows it reads anyway);
- ``expiring``: every job has one, far in the future (in jobs_expiring, never due);
- ``half expired``: N more jobs whose expiry has passed sit ahead of the N live ones in
  claim order; the claims cancel them (at most 1,000 each) on the way.

Run it with an older sluicegate on ``PYTHONPATH`` for the ``plain`` figure before the
change (the other cases need expiry).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from sluicegate.brokers.sqlite import SQLiteBroker
from sluicegate.codec import encode_payload
from sluicegate.job import JobSpec
from sluicegate.outcomes import Succeeded

HAS_EXPIRY = "expires_in" in JobSpec.__dataclass_fields__


def spec(**options: float) -> JobSpec:
    args, kwargs = encode_payload("noop", [], {})
    return JobSpec(task="noop", queue="default", args_json=args, kwargs_json=kwargs, **options)


def drain(case: str, jobs: int, batch: int, sync: str) -> float:
    with tempfile.TemporaryDirectory() as folder:
        clock_now = [time.time()]
        broker = SQLiteBroker(
            f"sqlite:///{Path(folder) / 'jobs.db'}?synchronous={sync}", clock=lambda: clock_now[0]
        )
        try:
            if case == "half expired":
                broker.enqueue([spec(priority=-1, expires_in=1.0) for _ in range(jobs)])
            live = {"plain": {}, "expiring": {"expires_in": 1e6}, "half expired": {}}[case]
            broker.enqueue([spec(**live) for _ in range(jobs)])
            clock_now[0] += 2.0  # the expiring ones of "half expired" are past their time
            done = 0
            started = time.perf_counter()
            while done < jobs:
                claimed = broker.claim(["default"], batch, 30.0, "bench")
                if not claimed:
                    continue
                broker.record((), [Succeeded(c.claim, "null") for c in claimed])
                done += len(claimed)
            return jobs / (time.perf_counter() - started)
        finally:
            broker.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sync", default="full", choices=["full", "normal", "off"])
    opts = parser.parse_args()
    cases = ["plain", "expiring", "half expired"] if HAS_EXPIRY else ["plain"]
    print(
        f"SQLite (synchronous={opts.sync}) claim + ack of {opts.jobs} jobs, {opts.batch} a "
        f"claim, median of {opts.repeat}"
    )
    for case in cases:
        rates = [drain(case, opts.jobs, opts.batch, opts.sync) for _ in range(opts.repeat)]
        print(f"  {case:<13} {statistics.median(rates):8.0f} jobs/s  (runs: "
              f"{', '.join(f'{r:.0f}' for r in rates)})")  # fmt: skip


if __name__ == "__main__":
    main()
