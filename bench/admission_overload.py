"""Overload against a bounded queue (issue: "bounded queues that tell producers the truth").

A real worker serves queue ``bounded`` with SLOTS thread slots and jobs of DURATION s, so it
completes SLOTS / DURATION jobs per second. A producer enqueues at twice that rate for
--seconds against ``max_wait`` (default 5 s) and records, per accepted job, the wait
admission predicted just before storing it, and per refusal its QueueFull. Afterwards the
measured wait of every accepted job (enqueued to started) is read back. Prints:

- the highest ready depth sampled (bounded: about max_wait x completion rate);
- accepted and refused counts, and a refusal's figures;
- measured wait of accepted jobs: p50, p95, max;
- mean predicted wait against mean measured wait (the ratio: within 25% is the claim).

    .venv/bin/python bench/admission_overload.py [--seconds 60] [--broker URL] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sluicegate import App
from sluicegate.errors import QueueFull

HERE = Path(__file__).resolve().parent
SLOTS = 4
DURATION = 0.1  # s: the worker completes SLOTS / DURATION = 40 jobs/s


def start_worker(url: str, folder: Path) -> subprocess.Popen[bytes]:
    script = Path(sys.executable).parent / "sluicegate"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "sluicegate.cli"]
    command += ["worker", "admissionapp:app", "--broker", url, "--pool",
                f"bounded=bounded:{SLOTS}", "--publish-interval", "0.5", "--lease", "5"]  # fmt: skip
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    )
    log = open(folder / "worker.log", "wb")  # noqa: SIM115 (the worker's for its life)
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=folder)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(url: str, seconds: float, max_wait: float) -> dict[str, Any]:
    app = App(url, config=False)
    app.queue("bounded", max_wait=max_wait)
    app.configure()
    rate = 2 * SLOTS / DURATION
    with tempfile.TemporaryDirectory() as folder:
        worker = start_worker(url, Path(folder))
        try:
            deadline = time.monotonic() + 30
            while not app.broker.list_workers().workers:  # the worker is up
                if time.monotonic() > deadline or worker.poll() is not None:
                    raise SystemExit((Path(folder) / "worker.log").read_text())
                time.sleep(0.1)
            accepted: list[tuple[int, float | None]] = []
            refusals: list[QueueFull] = []
            depth_max, next_sample = 0, 0.0
            start = time.monotonic()
            for i in range(int(rate * seconds)):
                pause = start + i / rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                predicted = app.predicted_wait("bounded")
                try:
                    job = app.enqueue("steady", [DURATION], queue="bounded")
                except QueueFull as exc:
                    refusals.append(exc)
                else:
                    accepted.append((job.id, predicted))
                if time.monotonic() >= next_sample:
                    depth = app.broker.queue_depths(["bounded"])["bounded"].ready
                    depth_max, next_sample = max(depth_max, depth), time.monotonic() + 0.5
            produced_for = time.monotonic() - start
            last, deadline = accepted[-1][0], time.monotonic() + 4 * max_wait + 30
            while app.broker.get_job(last).started_at is None:  # type: ignore[union-attr]
                if time.monotonic() > deadline or worker.poll() is not None:
                    raise SystemExit(
                        "the worker did not start the last accepted job:\n"
                        + (Path(folder) / "worker.log").read_text()
                    )
                time.sleep(0.2)
        finally:
            worker.terminate()
            worker.wait(30)
    pairs = []
    for job_id, predicted in accepted:
        job = app.broker.get_job(job_id)
        assert job is not None and job.started_at is not None
        pairs.append((predicted, job.started_at - job.enqueued_at))
    app.close()
    waits = [measured for _, measured in pairs]
    known = [(p, m) for p, m in pairs if p is not None]
    mean_predicted = statistics.fmean(p for p, _ in known)
    mean_measured = statistics.fmean(m for _, m in known)
    sample = refusals[len(refusals) // 2] if refusals else None
    return {
        "seconds": round(produced_for, 1),
        "offered_rate": rate,
        "completion_rate": SLOTS / DURATION,
        "max_wait": max_wait,
        "accepted": len(accepted),
        "refused": len(refusals),
        "refusals_with_figures": sum(
            r.predicted_wait is not None and r.depth > 0 and r.limit == max_wait for r in refusals
        ),
        "refusal_sample": None
        if sample is None
        else {
            "message": str(sample),
            "depth": sample.depth,
            "predicted_wait": sample.predicted_wait,
            "bound": sample.bound,
            "limit": sample.limit,
            "retry_after": sample.retry_after,
        },
        "ready_depth_max": depth_max,
        "wait_p50_s": quantile(waits, 0.5),
        "wait_p95_s": quantile(waits, 0.95),
        "wait_max_s": max(waits),
        "predicted_unknown": len(pairs) - len(known),
        "mean_predicted_wait_s": mean_predicted,
        "mean_measured_wait_s": mean_measured,
        "predicted_over_measured": mean_predicted / mean_measured,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--max-wait", type=float, default=5.0)
    parser.add_argument("--broker", help="broker URL (default: a scratch SQLite file)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        url = args.broker or f"sqlite:///{Path(scratch) / 'jobs.db'}"
        figures = run(url, args.seconds, args.max_wait)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    f = figures
    print(f"{f['seconds']} s at {f['offered_rate']:.0f} jobs/s offered, "
          f"{f['completion_rate']:.0f} jobs/s completed, max_wait {f['max_wait']} s")  # fmt: skip
    print(f"accepted {f['accepted']}, refused {f['refused']} "
          f"({f['refusals_with_figures']} with depth, predicted wait and bound)")  # fmt: skip
    if f["refusal_sample"]:
        print(f"  e.g. {f['refusal_sample']['message']}")
    print(f"ready depth: at most {f['ready_depth_max']}")
    print(f"measured wait of accepted jobs: p50 {f['wait_p50_s']:.2f} s, "
          f"p95 {f['wait_p95_s']:.2f} s, max {f['wait_max_s']:.2f} s")  # fmt: skip
    print(f"mean predicted wait {f['mean_predicted_wait_s']:.2f} s vs measured "
          f"{f['mean_measured_wait_s']:.2f} s: ratio {f['predicted_over_measured']:.2f} "
          f"({f['predicted_unknown']} accepted before any duration was observed)")  # fmt: skip


if __name__ == "__main__":
    main()
