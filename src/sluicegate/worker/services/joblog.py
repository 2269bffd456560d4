"""One log line per attempt's outcome, on the ``sluicegate.jobs`` logger.

The fields travel as the record's ``job`` attribute too, so ``--log-format json``
(``sluicegate.logs.JsonFormatter``) prints them as keys rather than parsing text.
Nothing is formatted when the logger would drop the line: at 10,000 jobs/s that
check is all a quiet worker pays.
"""

from __future__ import annotations

import logging

from ...job import Job

log = logging.getLogger("sluicegate.jobs")


class JobLog:
    def outcome(
        self, job: Job, pool: str, outcome: str, duration: float, wait: float, timed_out: bool
    ) -> None:
        level = logging.INFO if outcome == "succeeded" else logging.WARNING
        if not log.isEnabledFor(level):
            return
        fields = {
            "job_id": job.id,
            "task": job.task,
            "queue": job.queue,
            "pool": pool,
            "attempt": job.attempts,
            "outcome": outcome,
            "timed_out": timed_out,
            "duration_s": round(duration, 6),
            "wait_s": round(wait, 6),
        }
        log.log(
            level,
            "job %s %s%s task=%s queue=%s pool=%s attempt=%s duration=%.3fs wait=%.3fs",
            job.id,
            outcome,
            " (timed out)" if timed_out else "",
            job.task,
            job.queue,
            pool,
            job.attempts,
            duration,
            wait,
            extra={"job": fields},
        )
