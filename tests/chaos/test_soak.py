"""``make chaos`` in small: the soak (chaos/soak.py) for 15 s with a fixed seed, every
kind of fault fired at least once, loses nothing, leaves no unexplained duplicate and accepts no stale
call. Needs initdb/pg_ctl (the same rule as test_pg_restarts.py: skipped without them,
failed with SLUICEGATE_REQUIRE_POSTGRES=1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support import pg as pgserver

SOAK = Path(__file__).resolve().parents[2] / "chaos" / "soak.py"


@pytest.mark.slow
def test_short_soak_loses_nothing(tmp_path: Path) -> None:
    if pgserver.find_binaries() is None:
        reason = "no initdb/pg_ctl on PATH or under /usr/lib/postgresql/*/bin"
        print(f"soak test not run: {reason}")
        if pgserver.required():
            pytest.fail(f"{pgserver.ENV_REQUIRE}=1 but {reason}")
        pytest.skip(reason)
    report = tmp_path / "report.txt"
    done = subprocess.run(
        [
            sys.executable,
            str(SOAK),
            "--seconds",
            "15",
            "--fault-gap",
            "1,2.5",
            "--every-kind",
            "--seed",
            "11",
            "--rate",
            "20",
            "--drain-timeout",
            "40",
            "--out",
            str(report),
            "--workdir",
            str(tmp_path / "soak"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=110,
    )
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = dict(
        line.split(None, 1) if "  " not in line else line.split("  ", 1)
        for line in report.read_text().splitlines()
    )
    assert lines["LOST"].strip() == "0"
    assert lines["UNEXPLAINED DUPLICATES"].strip() == "0"
    assert lines["STALE CALLS ACCEPTED"].strip() == "0"
    fired = dict(part.split() for part in lines["faults"].split(" (")[0].split(", "))
    assert set(fired) == {"sigkill", "sigstop", "cut", "blackhole", "restart"}, fired
    assert all(int(n) >= 1 for n in fired.values()), fired
