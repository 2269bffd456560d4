"""Config files: ``sluicegate.toml`` or ``[tool.sluicegate]`` in pyproject.toml -> Settings.

Every error names the file, the key and the problem. The last tests run real
``sluicegate worker --burst`` processes to show that CLI flags override the file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sluicegate import App
from sluicegate.config import Settings, apply_overrides, load_settings
from sluicegate.errors import ConfigError
from sluicegate.task import TaskOptionsDict
from sluicegate.worker import PoolSpec

FULL = """\
broker = "sqlite:///jobs.db"
lease = 12.5
shutdown_timeout = 0

[pools.transcode]
queues = ["transcode", "thumbnails"]
slots = 4
model = "process"
max_jobs_per_child = 200
max_memory_mb = 512

[pools.email]
queues = { email = 3, reports = 1 }
slots = 3
model = "async"

[pools.index]
slots = 2

[tasks.send_reset]
queue = "email"
max_attempts = 5
timeout = 30
priority = -2
"""

EXPECTED_POOLS = [
    PoolSpec(
        "transcode",
        ("transcode", "thumbnails"),
        4,
        "process",
        options={"max_jobs_per_child": 200, "max_memory_mb": 512},
    ),
    PoolSpec("email", ("email", "reports"), 3, "async", weights=(3, 1)),
    PoolSpec("index", ("index",), 2, "thread"),
]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty current folder: the default config files are looked up here."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_sluicegate_toml_in_current_folder(here: Path) -> None:
    (here / "sluicegate.toml").write_text(FULL)
    settings = load_settings()
    assert settings.source == "sluicegate.toml"
    assert settings.broker == "sqlite:///jobs.db"
    assert settings.lease == 12.5
    assert settings.shutdown_timeout == 0
    assert settings.pools == EXPECTED_POOLS
    assert settings.tasks == {
        "send_reset": TaskOptionsDict(queue="email", max_attempts=5, timeout=30, priority=-2)
    }


def test_pyproject_tool_table(here: Path) -> None:
    nested = "\n".join(
        line.replace("[pools.", "[tool.sluicegate.pools.").replace(
            "[tasks.", "[tool.sluicegate.tasks."
        )
        for line in FULL.splitlines()
    )
    top, _, rest = nested.partition("[tool.sluicegate.pools.transcode]")
    text = f'[project]\nname = "x"\n\n[tool.sluicegate]\n{top}\n[tool.sluicegate.pools.transcode]{rest}'
    (here / "pyproject.toml").write_text(text)
    settings = load_settings()
    assert settings.source == "pyproject.toml [tool.sluicegate]"
    assert settings.lease == 12.5
    assert settings.pools == EXPECTED_POOLS
    assert settings.tasks["send_reset"]["max_attempts"] == 5


def test_sluicegate_toml_wins_over_pyproject(here: Path) -> None:
    (here / "sluicegate.toml").write_text("lease = 1")
    (here / "pyproject.toml").write_text("[tool.sluicegate]\nlease = 2")
    assert load_settings().lease == 1


def test_no_config_gives_empty_settings(here: Path) -> None:
    assert load_settings() == Settings()
    (here / "pyproject.toml").write_text('[project]\nname = "x"\n')  # no [tool.sluicegate]
    assert load_settings() == Settings()


def test_explicit_file_anywhere(tmp_path: Path, here: Path) -> None:
    other = tmp_path / "conf" / "workers.toml"
    other.parent.mkdir()
    other.write_text("lease = 3\n[pools.a]\nslots = 1")
    (here / "sluicegate.toml").write_text("lease = 99")  # ignored: the explicit file wins
    settings = load_settings(str(other))
    assert (settings.source, settings.lease) == (str(other), 3)
    assert settings.pools == [PoolSpec("a", ("a",), 1)]


def test_weighted_queues_keep_their_order_and_weights(here: Path) -> None:
    (here / "sluicegate.toml").write_text(
        "[pools.mixed]\nslots = 6\nqueues = { high = 5, mid = 2, low = 1 }\n"
    )
    (pool,) = load_settings().pools
    assert pool.queues == ("high", "mid", "low")
    assert pool.weights == (5, 2, 1)


def test_pool_queues_default_to_the_pool_name(here: Path) -> None:
    (here / "sluicegate.toml").write_text("[pools.email]\nslots = 2")
    assert load_settings().pools == [PoolSpec("email", ("email",), 2)]


# ---- errors name the file, the key and the problem ----------------------------------------

ERRORS = [
    # (config text, key named, problem named)
    ("workers = 3", "workers", "unknown key"),
    ('lease = "30"', "lease", "must be a number"),
    ("lease = 0", "lease", "must be a number of seconds from 0.5 to 86400, not 0"),
    ("lease = 0.001", "lease", "must be a number of seconds from 0.5 to 86400, not 0.001"),
    ("lease = 1e9", "lease", "must be a number of seconds from 0.5 to 86400, not 1000000000.0"),
    ("lease = nan", "lease", "must be a number of seconds from 0.5 to 86400, not nan"),
    ("shutdown_timeout = inf", "shutdown_timeout", "must be a number >= 0, not inf"),
    ("lease = true", "lease", "must be a number"),
    ("shutdown_timeout = -1", "shutdown_timeout", "must be a number >= 0"),
    ("broker = 5", "broker", "must be a string"),
    ("pools = 3", "pools", "must be a table"),
    ("pools = { x = 3 }", "pools.x", "must be a table"),
    ("[pools.x]\nslots = 1\nsize = 3", "pools.x.size", "unknown key"),
    ('[pools.x]\nqueues = ["q"]', "pools.x.slots", "is required"),
    ('[pools.x]\nslots = "4"', "pools.x.slots", "must be an integer >= 1, not '4'"),
    ("[pools.x]\nslots = 2.5", "pools.x.slots", "must be an integer"),
    ("[pools.x]\nslots = 0", "pools.x.slots", "must be an integer >= 1"),
    ("[pools.x]\nslots = 100000", "pools.x", "slots must be between 1 and 10000"),
    ('[pools.x]\nslots = 1\nmodel = "fibers"', "pools.x", "unknown model 'fibers'"),
    ("[pools.x]\nslots = 1\nmodel = 3", "pools.x.model", "must be a string"),
    ('[pools.x]\nslots = 1\nqueues = "q"', "pools.x.queues", "must be a list of names or a table"),
    ("[pools.x]\nslots = 1\nqueues = []", "pools.x", "has no queues"),
    ('[pools.x]\nslots = 1\nqueues = ["no spaces"]', "pools.x", "invalid queue name"),
    (
        "[pools.x]\nslots = 1\nqueues = { a = 0 }",
        "pools.x.queues.a",
        "weight must be an integer >= 1",
    ),
    ('[pools.x]\nslots = 1\nqueues = { a = "3" }', "pools.x.queues.a", "weight must be an integer"),
    ("[pools.x]\nslots = 1\nqueues = { a = 1.5 }", "pools.x.queues.a", "weight must be an integer"),
    (
        "[pools.x]\nslots = 1\nqueues = { a = true }",
        "pools.x.queues.a",
        "weight must be an integer",
    ),
    ("[pools.x]\nslots = 1\nmax_jobs_per_child = 0", "pools.x.max_jobs_per_child", ">= 1"),
    ('[pools.x]\nslots = 1\nmax_memory_mb = "lots"', "pools.x.max_memory_mb", "must be a number"),
    (
        "[pools.x]\nslots = 1\nmax_jobs_per_child = 5",
        "pools.x.max_jobs_per_child",
        "unknown option (thread pools have no options)",
    ),
    ('[pools."no spaces"]\nslots = 1', "pools.no spaces", "invalid pool name"),
    ("tasks = 5", "tasks", "must be a table"),
    ("[tasks]\nt = 5", "tasks.t", "must be a table"),
    ("[tasks.t]\nretries = 3", "tasks.t.retries", "unknown key"),
    ("[tasks.t]\nmax_attempts = 0", "tasks.t.max_attempts", "must be an integer >= 1"),
    ("[tasks.t]\nmax_attempts = 1.5", "tasks.t.max_attempts", "must be an integer >= 1"),
    ('[tasks.t]\ntimeout = "5"', "tasks.t.timeout", "must be a number"),
    ("[tasks.t]\ntimeout = 0", "tasks.t.timeout", "seconds > 0 (at most a century), not 0"),
    ("[tasks.t]\ntimeout = inf", "tasks.t.timeout", "seconds > 0 (at most a century), not inf"),
    ("[tasks.t]\ntimeout = true", "tasks.t.timeout", "must be a number of seconds > 0"),
    ("[tasks.t]\npriority = 1.5", "tasks.t.priority", "must be an integer"),
    ("[tasks.t]\npriority = 2147483648", "tasks.t.priority", "out of range"),
    ("[tasks.t]\nretry_on = []", "tasks.t.retry_on", "unknown key"),
    ("[tasks.t]\ntransactional = true", "tasks.t.transactional", "unknown key"),
    ("[tasks.t]\nqueue = 3", "tasks.t.queue", "must be a string"),
    ('[tasks.t]\nqueue = "no spaces"', "tasks.t.queue", "invalid queue name"),
]


@pytest.mark.parametrize(
    ("text", "key", "problem"), ERRORS, ids=[e[1] + "|" + e[2] for e in ERRORS]
)
def test_errors_name_file_key_and_problem(
    text: str, key: str, problem: str, tmp_path: Path
) -> None:
    path = tmp_path / "workers.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_settings(str(path))
    message = str(err.value)
    assert message.startswith(f"{path}: "), message
    assert f" {key}: " in message or f" {key}." in message, message
    assert problem in message, message


def test_task_option_errors_are_the_domain_checks_with_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "sluicegate.toml"
    path.write_text('[tasks.send_reset]\npriority = "high"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(str(path))
    assert str(err.value) == (
        f"{path}: tasks.send_reset.priority: priority must be an integer, not 'high'"
    )


def test_errors_in_pyproject_name_the_tool_table(here: Path) -> None:
    (here / "pyproject.toml").write_text('[tool.sluicegate.pools.x]\nslots = "two"\n')
    with pytest.raises(
        ConfigError, match=r"^pyproject\.toml \[tool\.sluicegate\]: pools\.x\.slots: "
    ):
        load_settings()


def test_bad_toml_names_the_file_and_the_place(here: Path) -> None:
    (here / "sluicegate.toml").write_text("[pools.x\nslots = 1\n")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert str(err.value).startswith("sluicegate.toml: not valid TOML: ")
    assert "line 1" in str(err.value)


def test_missing_explicit_file(here: Path) -> None:
    with pytest.raises(ConfigError, match=r"^nope\.toml: config file not found$"):
        load_settings("nope.toml")


def test_explicit_pyproject_without_the_table(here: Path) -> None:
    (here / "pyproject.toml").write_text('[project]\nname = "x"\n')
    with pytest.raises(ConfigError, match=r"^pyproject\.toml: no \[tool\.sluicegate\] table$"):
        load_settings("pyproject.toml")


# ---- [tasks.NAME] overrides ------------------------------------------------------------------


def overrides_app() -> App:
    app = App(broker="memory://")

    @app.task(queue="default", max_attempts=3)
    def send_reset(user_id: int) -> int:
        return user_id

    @app.task
    def other() -> None: ...

    return app


def test_apply_overrides_changes_task_options(here: Path) -> None:
    (here / "sluicegate.toml").write_text(
        '[tasks.send_reset]\nqueue = "email"\nmax_attempts = 5\ntimeout = 30\npriority = -2\n'
    )
    app = overrides_app()
    apply_overrides(app, load_settings())
    options = app.tasks["send_reset"].options
    assert (options.queue, options.max_attempts, options.timeout) == ("email", 5, 30)
    assert options.priority == -2
    assert app.tasks["other"].options.queue == "default"  # untouched
    job = app.tasks["send_reset"].enqueue(1)  # routing and budget follow the override
    assert (job.queue, job.max_attempts, job.priority) == ("email", 5, -2)
    app.close()


def test_override_of_an_unknown_task_names_file_key_and_the_known_tasks(here: Path) -> None:
    (here / "sluicegate.toml").write_text("[tasks.send_rest]\ntimeout = 3\n")
    app = overrides_app()
    with pytest.raises(ConfigError) as err:
        apply_overrides(app, load_settings())
    assert str(err.value) == (
        "sluicegate.toml: tasks.send_rest: no such task in the app (tasks: other, send_reset)"
    )
    app.close()


# ---- producers apply [tasks.NAME] too: App(config=...) -----------------------------------------


def test_a_producer_applies_the_settings_file_of_its_folder(here: Path) -> None:
    (here / "sluicegate.toml").write_text('[tasks.x]\nqueue = "other"\nmax_attempts = 7\n')
    app = App(broker=f"sqlite:///{here / 'jobs.db'}")

    @app.task
    def x() -> None: ...

    assert x.options.queue == "default"  # nothing is read before first use
    job = x.enqueue()
    assert (job.queue, job.max_attempts) == ("other", 7)
    assert app.get_job(job.id).queue == "other"
    assert app.enqueue("x").queue == "other"  # by name
    assert x.with_options(priority=1).enqueue().queue == "other"
    assert x.with_options(queue="mine").enqueue().queue == "mine"  # per enqueue still wins
    assert [j.queue for j in app.enqueue_many([("x", [], {})])] == ["other"]
    (here / "sluicegate.toml").write_text('[tasks.x]\nqueue = "third"\n')
    assert x.enqueue().queue == "other"  # read once
    claimed = app.broker.claim(["other"], 10, 30, "w")
    assert len(claimed) == 5
    app.close()


def test_pyproject_tool_table_reaches_a_producer_too(here: Path) -> None:
    (here / "pyproject.toml").write_text("[tool.sluicegate.tasks.x]\npriority = -5\n")
    app = App(broker="memory://")

    @app.task
    def x() -> None: ...

    assert x.enqueue().priority == -5
    assert app.configure().source == "pyproject.toml [tool.sluicegate]"


def test_config_path_and_config_false(here: Path, tmp_path: Path) -> None:
    (here / "sluicegate.toml").write_text('[tasks.x]\nqueue = "from_folder"\n')
    elsewhere = tmp_path / "conf" / "prod.toml"
    elsewhere.parent.mkdir()
    elsewhere.write_text('[tasks.x]\nqueue = "from_path"\n')
    for config, queue in (
        (elsewhere, "from_path"),
        (str(elsewhere), "from_path"),
        (False, "default"),
    ):
        app = App(broker="memory://", config=config)

        @app.task
        def x() -> None: ...

        assert x.enqueue().queue == queue, config


def test_configure_applies_once_and_later_tasks_get_their_override(here: Path) -> None:
    (here / "sluicegate.toml").write_text("[tasks.late]\ntimeout = 5\n[tasks.early]\ntimeout = 6\n")
    app = App(broker="memory://")

    @app.task
    def early() -> None: ...

    with pytest.raises(ConfigError, match=r"tasks\.late: no such task in the app"):
        app.configure()  # a task the app does not have (yet) is an error, and nothing is kept
    assert early.options.timeout is None

    @app.task
    def late() -> None: ...

    settings = app.configure()
    assert app.configure() is settings
    assert (early.options.timeout, late.options.timeout) == (6, 5)

    @app.task(queue="q")
    def later() -> None: ...  # no override: untouched

    assert later.options.queue == "q"


def test_an_override_of_an_unknown_task_fails_the_enqueue_and_stores_nothing(
    here: Path,
) -> None:
    (here / "sluicegate.toml").write_text("[tasks.send_rest]\ntimeout = 3\n")
    app = App(broker=f"sqlite:///{here / 'jobs.db'}")  # no error when made: nothing read yet
    app.task(name="send_reset")(lambda: None)
    message = "sluicegate.toml: tasks.send_rest: no such task in the app (tasks: send_reset)"
    for attempt in range(2):  # every enqueue says so, not just the first
        with pytest.raises(ConfigError) as err:
            app.enqueue("send_reset")
        assert str(err.value) == message, attempt
    assert app.broker.list_jobs() == []
    app.close()


def test_use_config_chooses_the_file_before_it_is_applied(here: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.toml"
    other.write_text('[tasks.x]\nqueue = "other"\n')
    app = App(broker="memory://")

    @app.task
    def x() -> None: ...

    app.use_config(other)
    assert x.enqueue().queue == "other"
    app.use_config(other)  # the same again: fine
    with pytest.raises(ConfigError, match="already applied"):
        app.use_config(None)


def test_a_bad_settings_file_is_reported_on_first_use_not_when_the_app_is_made(
    here: Path,
) -> None:
    (here / "sluicegate.toml").write_text("[tasks.x]\npriority = 1.5\n")
    app = App(broker="memory://")
    app.task(name="x")(lambda: None)
    with pytest.raises(
        ConfigError, match=r"^sluicegate\.toml: tasks\.x\.priority: priority must be an integer"
    ):
        app.enqueue("x")


# ---- CLI flags override the file (real `sluicegate worker --burst`) ------------------------

CLI_APP = textwrap.dedent(
    """
    import time
    from sluicegate import App
    from sluicegate.context import current_job

    app = App()

    def lease_left():
        job = current_job()
        return {"queue": job.queue, "lease_left": job.lease_expires_at - time.time()}

    @app.task(queue="a")
    def on_a():
        return lease_left()

    @app.task(queue="b")
    def on_b():
        return lease_left()

    @app.task(queue="a", max_attempts=1)
    def slow():
        time.sleep(1)  # the job's body: it runs past its 0.2 s timeout
    """
)
CLI_CONFIG = textwrap.dedent(
    """
    broker = "sqlite:///from_config.db"
    lease = 120

    [pools.from_config]
    queues = ["a"]
    slots = 2

    [tasks.slow]
    timeout = 0.2
    """
)


def sluicegate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SLUICEGATE_BROKER"}
    return subprocess.run(
        [sys.executable, "-m", "sluicegate.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "cliapp.py").write_text(CLI_APP)
    (tmp_path / "sluicegate.toml").write_text(CLI_CONFIG)
    return tmp_path


@pytest.fixture
def producer(project: Path) -> Iterator[Callable[[str], App]]:
    """Apps on SQLite files of the project folder (as the worker, run there, sees them)."""
    opened: list[App] = []

    def open_app(name: str) -> App:
        app = App(broker=f"sqlite:///{project / name}")
        opened.append(app)
        return app

    yield open_app
    for app in opened:
        app.close()


def test_worker_uses_the_config_file(project: Path, producer: Callable[[str], App]) -> None:
    app = producer("from_config.db")
    on_a, on_b = app.enqueue("on_a", queue="a"), app.enqueue("on_b", queue="b")
    result = sluicegate(project, "worker", "cliapp:app", "--burst", "--no-prune")
    assert result.returncode == 0, result.stderr
    assert "from_config=a:2:thread" in result.stderr
    done = app.get_job(on_a.id)
    assert done.state.value == "succeeded"
    assert 100 < done.result["lease_left"] <= 120  # the file's lease
    assert app.get_job(on_b.id).state.value == "ready"  # no pool of the file serves queue b


def test_flags_override_pools_lease_and_broker(
    project: Path, producer: Callable[[str], App]
) -> None:
    app = producer("from_flag.db")
    on_a, on_b = app.enqueue("on_a", queue="a"), app.enqueue("on_b", queue="b")
    result = sluicegate(
        project,
        "worker",
        "cliapp:app",
        "--burst",
        "--no-prune",
        "--pool",
        "from_flag=b:1",
        "--lease",
        "7",
        "--broker",
        "sqlite:///from_flag.db",
    )
    assert result.returncode == 0, result.stderr
    assert "from_flag=b:1:thread" in result.stderr
    assert "from_config" not in result.stderr  # --pool replaces the file's pools
    done = app.get_job(on_b.id)
    assert done.state.value == "succeeded"
    assert 3 < done.result["lease_left"] <= 7  # --lease, not the file's 120
    assert app.get_job(on_a.id).state.value == "ready"
    assert not (project / "from_config.db").exists()  # --broker replaced the file's broker


def test_the_group_broker_flag_beats_the_file_too(
    project: Path, producer: Callable[[str], App]
) -> None:
    app = producer("from_group.db")
    job = app.enqueue("on_a", queue="a")
    result = sluicegate(
        project, "--broker", "sqlite:///from_group.db", "worker", "cliapp:app", "--burst"
    )
    assert result.returncode == 0, result.stderr
    assert app.get_job(job.id).state.value == "succeeded"
    assert not (project / "from_config.db").exists()


def test_explicit_config_flag_and_task_overrides_reach_the_worker(
    project: Path, tmp_path: Path, producer: Callable[[str], App]
) -> None:
    explicit = tmp_path / "elsewhere.toml"
    (project / "sluicegate.toml").rename(explicit)
    app = producer("from_config.db")
    job = app.enqueue("slow", queue="a", max_attempts=1)
    result = sluicegate(project, "worker", "cliapp:app", "--burst", "--config", str(explicit))
    assert result.returncode == 0, result.stderr
    dead = app.get_job(job.id)
    assert dead.state.value == "dead"  # [tasks.slow] timeout = 0.2 applied
    assert dead.last_error is not None
    assert dead.last_error.message == "timed out after 0.2 s"


def test_the_cli_reads_the_settings_file_the_app_names(project: Path) -> None:
    """App(config=PATH): the worker and `tasks` take pools and overrides from that file."""
    (project / "sluicegate.toml").rename(project / "prod.toml")
    (project / "sluicegate.toml").write_text("[pools.ignored]\nslots = 1\n")
    source = (project / "cliapp.py").read_text()
    (project / "cliapp.py").write_text(source.replace("App()", 'App(config="prod.toml")'))
    result = sluicegate(project, "tasks", "cliapp:app", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["task"]: row for row in json.loads(result.stdout)}
    assert rows["slow"]["timeout"] == 0.2 and rows["slow"]["pools"] == ["from_config"]
    assert rows["on_b"]["pools"] == []
    flag = sluicegate(project, "tasks", "cliapp:app", "--json", "--config", "sluicegate.toml")
    assert flag.returncode == 0, flag.stderr
    assert {row["task"]: row for row in json.loads(flag.stdout)}["slow"]["timeout"] is None


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("[pools.x]\nslots = 0\n", "sluicegate.toml: pools.x.slots: must be an integer >= 1"),
        ("[tasks.nope]\ntimeout = 1\n", "sluicegate.toml: tasks.nope: no such task in the app"),
        ("lease = [", "sluicegate.toml: not valid TOML"),
    ],
)
def test_worker_reports_config_errors_in_one_line(
    project: Path, config: str, expected: str
) -> None:
    (project / "sluicegate.toml").write_text(config)
    result = sluicegate(project, "worker", "cliapp:app", "--burst")
    assert result.returncode == 2
    assert result.stderr.startswith(f"sluicegate: {expected}"), result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_worker_reports_a_missing_config_file(project: Path) -> None:
    result = sluicegate(project, "worker", "cliapp:app", "--burst", "--config", "nope.toml")
    assert result.returncode == 2
    assert result.stderr.strip() == "sluicegate: nope.toml: config file not found"
