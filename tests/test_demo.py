"""``sluicegate demo``: separate budgets keep short jobs flowing past a transcode burst."""

from __future__ import annotations

import gc
import io
import tempfile
import threading
from pathlib import Path

import pytest
from rich.console import Console

from sluicegate.demo import build_schedule, percentile, run_demo

pytestmark = pytest.mark.slow  # real processes for tens of seconds: started first


def test_schedule_is_seeded_a_burst_then_a_trickle() -> None:
    quick = build_schedule(quick=True)
    assert quick == build_schedule(quick=True)
    assert build_schedule(quick=True, seed=1) != quick
    full = build_schedule()
    for schedule, transcodes in ((quick, 12), (full, 40)):
        burst = [a for a in schedule if a.job_class == "transcode"]
        trickle = [a for a in schedule if a.job_class != "transcode"]
        assert len(burst) == transcodes
        assert {a.job_class for a in trickle} == {"email", "index"}
        assert max(a.at for a in burst) < min(a.at for a in trickle)
        assert [a.at for a in schedule] == sorted(a.at for a in schedule)


def test_percentile_interpolates() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([7.0], 95) == 7.0
    assert percentile([float(v) for v in range(101)], 95) == 95.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_quick_demo_separate_pools_cut_email_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp, cwd = tmp_path / "tmp", tmp_path / "cwd"
    temp.mkdir()
    cwd.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.chdir(cwd)
    out = io.StringIO()

    result = run_demo(quick=True, console=Console(file=out, width=200))

    shared, separate = result.shared.classes, result.separate.classes
    assert separate["email"].p95_wait_ms * 5 < shared["email"].p95_wait_ms
    # The shared pool's cost is structural: emails that arrive during the burst wait for it.
    assert shared["email"].max_wait_ms > 100
    # Each class ran in the model its pool names: transcodes in child processes (at most the
    # 4 of their own pool when separate), emails and index updates in the worker process
    # itself when separate (async loop, threads), in the shared pool's children otherwise.
    assert 4 < shared["transcode"].processes <= 10
    assert 1 <= separate["transcode"].processes <= 4
    assert shared["email"].processes >= 1 and shared["index"].processes >= 1
    assert separate["email"].processes == 0 and separate["index"].processes == 0
    schedule = build_schedule(quick=True)
    for run in (result.shared, result.separate):
        for job_class, stats in run.classes.items():
            assert stats.jobs == sum(1 for a in schedule if a.job_class == job_class)
    text = out.getvalue()
    assert "p95 wait" in text
    assert all(line in text for line in result.conclusion)
    assert "separate budgets keep them flowing" in result.conclusion[1]
    # Nothing left behind: not in the temporary folder, not in the working directory.
    assert list(temp.iterdir()) == []
    assert list(cwd.iterdir()) == []
    # The worker's async loop is closed, not left to the garbage collector to warn about.
    for thread in threading.enumerate():
        if thread.name.endswith("-loop"):
            thread.join(timeout=5)
    gc.collect()
