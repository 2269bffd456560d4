"""The issue's overload claim, shortened: a producer offers twice the completion rate of a
real worker (4 slots x 0.1 s jobs = 40/s) against max_wait = 5 s for 20 s, on SQLite.
bench/admission_overload.py runs it (60 s there) and prints the same figures.

Asserted with room for a loaded machine: the ready depth stays bounded (about 5 s x 40/s
= 200), the accepted jobs' measured wait stays near the bound, every refusal carries its
figures, and the mean predicted wait is close to the mean measured one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "admission_overload.py"


@pytest.mark.slow
def test_overload_is_refused_with_figures_and_the_wait_stays_bounded(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--seconds", "20", "--broker", url, "--json"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    f = json.loads(done.stdout)
    assert f["refused"] > 0 and f["accepted"] > 0
    assert f["refusals_with_figures"] == f["refused"]
    sample = f["refusal_sample"]
    assert sample["bound"] == "max_wait" and sample["limit"] == 5.0
    assert sample["predicted_wait"] > 5.0 and sample["depth"] > 0
    assert f["ready_depth_max"] <= 400  # 2 x (max_wait x completion rate)
    assert f["wait_p95_s"] < 8.0  # the 6 s, with room for a loaded machine
    assert 0.6 <= f["predicted_over_measured"] <= 1.5  # the 25%, with room
