"""Processes for bench/compare.py: adapter roles, workers in their own process groups,
the sink watched as it grows, and CPU read from /proc (through psutil).

Every worker is started in a new session, so one ``killpg`` reaches the whole tree
(Celery's pool children, a CLI that execs); :func:`stop_all` ends whatever is left on
exit, after an error or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

PEERS_DIR = Path(__file__).resolve().parent / "peers"
LIVE: dict[int, subprocess.Popen[bytes]] = {}  # pgid -> worker, until stopped


class AdapterError(RuntimeError):
    """An adapter role failed: the message carries the end of its stderr."""


class Unsupported(RuntimeError):
    """The adapter says the system has no such call (e.g. no bulk enqueue)."""


@dataclass(frozen=True)
class System:
    key: str  # --systems name
    label: str  # the table's row
    adapter: str  # file in bench/peers
    env: str  # "project" (.venv) or "peers" (the peers' virtualenv)
    store: str  # "sqlite", "postgresql" or "redis"
    python: str = ""  # filled in when the environment is known

    @property
    def path(self) -> Path:
        return PEERS_DIR / self.adapter


def last_json(text: str) -> dict[str, Any]:
    """The last line of ``text`` that parses as a JSON object."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    raise AdapterError(f"no JSON line in the adapter's output: {text[-300:]!r}")


def run_role(system: System, role: str, *args: str, timeout: float = 600) -> dict[str, Any]:
    """Run one short role (setup, enqueue, latency, describe) to its end; its JSON line."""
    cmd = [system.python, str(system.path), role, *args]
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, cwd=PEERS_DIR, check=False
        )
    except subprocess.TimeoutExpired:
        raise AdapterError(f"{system.key} {role}: no answer within {timeout:.0f} s") from None
    if done.returncode != 0:
        try:
            answer = last_json(done.stdout)
        except AdapterError:
            answer = {}
        if "unsupported" in answer:
            raise Unsupported(str(answer["unsupported"]))
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise AdapterError(f"{system.key} {role} exited {done.returncode}: {' | '.join(tail)}")
    answer = last_json(done.stdout)
    if "unsupported" in answer:
        raise Unsupported(str(answer["unsupported"]))
    return answer


class Worker:
    """One adapter ``worker`` process (and its children), in its own process group."""

    def __init__(self, system: System, args: list[str], logdir: Path, tag: str) -> None:
        self.out = logdir / f"{system.key}-{tag}.out"
        self.err = logdir / f"{system.key}-{tag}.err"
        cmd = [system.python, str(system.path), "worker", *args]
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                cwd=PEERS_DIR, start_new_session=True,
            )  # fmt: skip
        self.pgid = self.proc.pid  # a new session: its leader's pid is the group id
        LIVE[self.pgid] = self.proc
        self.notes = ""

    def wait_ready(self, timeout: float = 60) -> None:
        """Until the worker's ``{"ready": true}`` line (raises if it exits or never says)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.out.read_text(errors="replace").splitlines():
                if line.startswith("{") and '"ready"' in line:
                    self.notes = str(json.loads(line).get("notes", ""))
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        tail = self.err.read_text(errors="replace").strip().splitlines()[-3:]
        self.stop()
        raise AdapterError(f"worker never ready: {' | '.join(tail)}")

    def cpu(self) -> float:
        """CPU seconds of the worker's whole tree, reaped children included."""
        return tree_cpu(self.proc.pid)

    def kill(self) -> None:
        """SIGKILL to the whole process group, at once (the crash workload)."""
        signal_group(self.pgid, signal.SIGKILL)
        self.proc.wait()
        LIVE.pop(self.pgid, None)

    def stop(self, grace: float = 10) -> None:
        """SIGTERM to the group, SIGKILL to what is left after ``grace`` seconds."""
        stop_group(self.pgid, self.proc, grace)


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_group(pgid: int, proc: subprocess.Popen[bytes], grace: float) -> None:
    signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and group_alive(pgid):
        proc.poll()  # reap the leader, or the group looks alive while it is a zombie
        time.sleep(0.05)
    signal_group(pgid, signal.SIGKILL)
    proc.wait()
    LIVE.pop(pgid, None)


def stop_all() -> None:
    """End every worker still running (after an error or Ctrl-C)."""
    for pgid, proc in list(LIVE.items()):
        stop_group(pgid, proc, grace=3)


def proc_cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def tree_cpu(pid: int) -> float:
    """CPU of ``pid`` and its descendants (psutil ``children(recursive=True)``)."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for process in tree:
        try:
            total += proc_cpu(process)
        except psutil.Error:
            continue
    return total


@dataclass
class PidCpu:
    """CPU of a changing set of server processes (PostgreSQL backends): per pid, the
    first and the latest reading, so a backend that ends keeps what it used."""

    first: dict[int, float] = field(default_factory=dict)
    last: dict[int, float] = field(default_factory=dict)

    def sample(self, pids: list[int], *, baseline: bool = False) -> None:
        for pid in pids:
            try:
                value = proc_cpu(psutil.Process(pid))
            except psutil.Error:
                continue
            self.first.setdefault(pid, value if baseline else 0.0)
            self.last[pid] = value

    def used(self) -> float:
        return sum(self.last[pid] - self.first[pid] for pid in self.last)


class SinkWatcher:
    """Counts the sink's lines as they arrive, reading only what is new."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.lines = 0

    def count(self) -> int:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return 0
        whole = chunk.rfind(b"\n") + 1  # only complete lines
        self.lines += chunk.count(b"\n", 0, whole)
        self.offset += whole
        return self.lines
