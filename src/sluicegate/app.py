"""The App: task registry, routing, the producer API and the settings file's task overrides."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar, Unpack, overload

from .admission import Gate, QueueBounds, Verdict, shed_one, shed_refused
from .brokers import Broker, PausedQueue, broker_from_url
from .codec import DEFAULT_PAYLOAD_LIMIT, encode_payload
from .errors import ConfigError, JobNotFound
from .hooks import Hooks, check_kind
from .job import Job, JobSpec
from .limits import Limit, Need, encode_needs, partition_value
from .names import check_name
from .schedules import Schedule
from .task import (
    MISSING,
    NO_OPTIONS,
    EnqueueOptions,
    EnqueueOptionsDict,
    Task,
    TaskOptions,
    TaskOptionsDict,
    check_expiry,
    delay_seconds,
    epoch,
    expires_in_seconds,
)

if TYPE_CHECKING:
    from .settings_file import TaskSettings
    from .waiting import Waits

P = ParamSpec("P")
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])
TaskT = TypeVar("TaskT", bound="Task[Any, Any]")  # @app.periodic returns the task it decorates

DEFAULT_BROKER = "sqlite:///sluicegate.db"
DEFAULT_OPTIONS = TaskOptions()  # of a task this app does not register
BROKER_ENV = "SLUICEGATE_BROKER"


SPEC_SLICE = 100  # enqueue_many_async yields to the loop after building this many specs


def found(job: Job | None, job_id: int | str) -> Job:
    if job is None:
        raise JobNotFound(f"job {job_id} not found")
    return job


def default_broker_url() -> str:
    return os.environ.get(BROKER_ENV) or DEFAULT_BROKER


ConfigSource = str | os.PathLike[str] | Literal[False] | None


class App:
    """Holds tasks and a broker. The broker opens on first use, so importing an app is cheap.

    ``config`` is where the settings file's ``[tasks.NAME]`` overrides come from: None
    (the default) looks for ./sluicegate.toml, else ``[tool.sluicegate]`` in
    ./pyproject.toml, as the worker does; a path names the file; False reads none. The
    file is read once, on first use (``configure``), not when the app is made, so the
    tasks are registered by then.
    """

    def __init__(
        self,
        broker: str | Broker | None = None,
        *,
        config: ConfigSource = None,
        payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
    ) -> None:
        self._broker_url = broker if isinstance(broker, str) else None
        self._broker = broker if isinstance(broker, Broker) else None
        self._lock = threading.Lock()
        self._config = config
        self._settings: TaskSettings | None = None  # set once the overrides are applied
        self._config_lock = threading.Lock()
        self.payload_limit = payload_limit
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.limits: dict[str, Limit] = {}  # declared here or in the settings file
        self.import_path: str | None = None  # "MODULE:APP", set when loaded by that path
        self._waits: Waits | None = None  # job.wait's hub, made on the first wait
        self.hooks = Hooks()  # lifecycle hooks (sluicegate.hooks, docs/hooks.md)
        self.queues: dict[str, QueueBounds] = {}  # admission bounds (docs/admission.md)
        self._gate = Gate()

    # ---- broker ------------------------------------------------------------------
    @property
    def broker_url(self) -> str:
        if self._broker is not None:
            return self._broker.url
        return self._broker_url or default_broker_url()

    @property
    def broker(self) -> Broker:
        with self._lock:
            if self._broker is None:
                self._broker = broker_from_url(self.broker_url)
            return self._broker

    def use_broker(self, broker: str | Broker) -> None:
        """Point the app at another broker (the CLI's --broker does this)."""
        self._stop_waiting()
        with self._lock:
            if self._broker is not None and self._broker is not broker:
                self._broker.close()
            self._broker = broker if isinstance(broker, Broker) else None
            self._broker_url = broker if isinstance(broker, str) else None

    @contextlib.contextmanager
    def borrowing(self, broker: Broker) -> Iterator[App]:
        """Store into and read from ``broker`` inside the block (tests, with a broker of
        their own); after it, the app's own broker (or URL) is back, neither opened nor
        closed here. ``broker`` is the caller's to close."""
        self._stop_waiting()  # job.wait's hub follows the broker
        with self._lock:
            saved = self._broker, self._broker_url
            self._broker, self._broker_url = broker, None
        try:
            yield self
        finally:
            self._stop_waiting()
            with self._lock:
                self._broker, self._broker_url = saved

    def close(self) -> None:
        self._stop_waiting()
        with self._lock:
            if self._broker is not None:
                self._broker.close()
                self._broker = None

    # ---- settings ----------------------------------------------------------------
    def use_config(self, config: ConfigSource) -> None:
        """Take the settings from ``config`` instead (the CLI's ``--config`` does this);
        only before they are applied."""
        with self._config_lock:
            if self._settings is not None and config != self._config:
                source = self._settings.source or "no settings file"
                raise ConfigError(
                    f"cannot use settings file {config!r}: the app already applied {source}"
                )
            self._config = config

    def configure(self) -> TaskSettings:
        """Read the settings file (once) and apply its ``[tasks.NAME]`` overrides to the
        registered tasks; an override naming no task of the app is an error naming file and
        key. The first enqueue calls this; ``sluicegate worker`` and ``sluicegate tasks``
        call it when they start, and so should code that starts a ``Worker`` itself."""
        settings = self._settings
        if settings is not None:
            return settings
        from .settings_file import TaskSettings, apply_overrides, read_task_settings

        with self._config_lock:
            if self._settings is None:
                config = self._config
                if config is False:
                    found = TaskSettings()
                else:
                    found = read_task_settings(None if config is None else os.fspath(config))
                apply_overrides(self, found)
                declared = {**self.limits, **found.limits}  # the file's win over the code's
                for task in self.tasks.values():
                    self._check_limits(task, declared)
                self.limits = declared
                self._configure_schedules(found)  # [schedules.NAME]; their tasks checked
                self.queues = {**self.queues, **found.queues}  # the file's win here too
                self._settings = found  # only once every check passed
            return self._settings

    # ---- limits ------------------------------------------------------------------
    def limit(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        rate: str | float | None = None,
        burst: int | None = None,
        scope: str = "global",
        partition: str | None = None,
    ) -> Limit:
        """Declare a limit tasks may name: ``app.limit("storage", concurrency=4,
        scope="host")``, ``app.limit("email", rate="10/s", burst=10, partition="account")``.

        Workers register the app's limits in the broker when they start; a settings
        file's ``[limits.NAME]`` table declares one too, and wins over the code."""
        limit = Limit.of(
            name,
            concurrency=concurrency,
            rate=rate,
            burst=burst,
            scope=scope,
            partition=partition,
        )
        known = self.limits.get(name)
        if known is not None and known != limit:
            raise ConfigError(f"limit {name!r} is declared twice, differently")
        self.limits[name] = limit
        return limit

    def _check_limits(
        self, task: Task[Any, Any], declared: Mapping[str, Limit] | None = None
    ) -> None:
        limits = self.limits if declared is None else declared
        for name, cost in task.options.costs:
            limit = limits.get(name)
            if limit is None:
                known = ", ".join(sorted(limits)) or "none"
                raise ConfigError(
                    f"task {task.name!r} uses limit {name!r}, which is not declared: add "
                    f"app.limit({name!r}, ...) or [limits.{name}] to the settings file "
                    f"(limits: {known})"
                )
            if limit.concurrency is not None and cost > limit.concurrency:
                raise ConfigError(
                    f"task {task.name!r} costs {cost} of limit {name!r}, "
                    f"whose concurrency is {limit.concurrency}: it could never start"
                )
            if limit.rate is not None and cost > limit.capacity:
                raise ConfigError(
                    f"task {task.name!r} costs {cost} of limit {name!r}, "
                    f"whose burst is {limit.capacity}: it could never start"
                )

    def _needs(
        self,
        task: Task[Any, Any],
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        limit_key: str | Mapping[str, str] | None,
    ) -> str | None:
        """The job's needs: per limit its partition value (``limit_key``, else the
        argument the limit is partitioned by) and its cost."""
        needs: list[Need] = []
        partitioned = {n for n, _ in task.options.costs if self.limits[n].partition is not None}
        if limit_key is not None:
            named = set(limit_key) if isinstance(limit_key, Mapping) else partitioned
            if not partitioned or not named <= partitioned:
                raise ConfigError(
                    f"task {task.name!r}: limit_key names no partitioned limit of the task "
                    f"(its partitioned limits: {', '.join(sorted(partitioned)) or 'none'})"
                )
        for name, cost in task.options.costs:
            limit = self.limits[name]  # configure() checked that it exists
            part = None
            if limit.partition is not None:
                given = limit_key.get(name) if isinstance(limit_key, Mapping) else limit_key
                if given is not None:
                    part = given
                else:
                    value = task.argument(limit.partition, args, kwargs)
                    if value is MISSING:
                        raise ConfigError(
                            f"task {task.name!r}: limit {name!r} is partitioned by "
                            f"{limit.partition!r}; pass that argument or limit_key="
                        )
                    part = partition_value(value)
            needs.append((name, part, cost))
        return encode_needs(needs)

    # ---- registry ----------------------------------------------------------------
    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self, fn: None = None, /, *, name: str | None = None, **options: Unpack[TaskOptionsDict]
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        name: str | None = None,
        **options: Unpack[TaskOptionsDict],
    ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """Register a task: ``@app.task`` or ``@app.task(queue="email", max_attempts=5)``.

        The options are ``TaskOptionsDict``'s (defaults in ``TaskOptions``). ``name``
        defaults to the function's name. ``transactional=True`` (postgresql broker): the
        task is called with a ``connection=`` keyword argument, a psycopg connection in an
        open transaction; its writes and the job's ack commit together, and a raise rolls
        both back.
        """

        def register(f: Callable[P, R]) -> Task[P, R]:
            task_name = name or f.__name__
            task: Task[P, R] = Task(self, f, task_name, TaskOptions.of(task_name, options))
            if task_name in self.tasks:
                raise ConfigError(f"task {task_name!r} is registered twice")
            self.tasks[task_name] = task
            if self._settings is not None:  # registered after configure(): its override now
                from .settings_file import apply_override

                apply_override(task, self._settings)
                self._check_limits(task)
            return task

        return register(fn) if fn is not None else register

    # ---- producing ----------------------------------------------------------------
    def build_spec(
        self,
        name: str,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Unpack[EnqueueOptionsDict],
    ) -> JobSpec:
        """Check and encode one job (``connection`` plays no part); raises before anything
        is stored. ``app.broker.enqueue(specs)`` stores specs in one transaction."""
        return self._spec(name, args, kwargs, EnqueueOptions.of(name, options))

    def enqueue(
        self,
        name: str,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Unpack[EnqueueOptionsDict],
    ) -> Job:
        """Enqueue a job by task name (the task need not be registered here). Durable on return.

        The options are ``EnqueueOptionsDict``'s; None keeps the task's own (or the
        defaults, for a task this app does not register). ``connection`` (postgresql
        broker): a psycopg connection with an open transaction; the job is written in it,
        so it exists only if, and once, the caller commits.
        """
        return self._enqueue(name, args, kwargs, EnqueueOptions.of(name, options))

    def enqueue_many(
        self, calls: Iterable[tuple[str, Sequence[Any], Mapping[str, Any]]], connection: Any = None
    ) -> list[Job]:
        """Enqueue ``(task_name, args, kwargs)`` triples in one transaction; all or nothing."""
        specs = list(self._specs(calls))
        broker = self.broker
        return self._enqueued(broker.enqueue(specs, connection=connection), broker)

    def _enqueue(
        self,
        name: str,
        args: Sequence[Any] | None,
        kwargs: Mapping[str, Any] | None,
        options: EnqueueOptions,
    ) -> Job:
        spec = self._spec(name, args, kwargs, options)
        if spec.queue in self.queues or options.max_wait is not None:
            return self._admit(spec, options)
        broker = self.broker
        return self._enqueued(broker.enqueue([spec], connection=options.connection), broker)[0]

    def _specs(
        self, calls: Iterable[tuple[str, Sequence[Any] | None, Mapping[str, Any] | None]]
    ) -> Iterator[JobSpec]:
        """``enqueue_many``'s specs, in order: ``_spec`` with no options, with what depends
        only on the task (its name's check, its defaults, its expiry) worked out once per
        task name. Tasks that use limits (needs per call) go through ``_spec``."""
        if self._settings is None:
            self.configure()
        known: dict[str, JobSpec | None] = {}  # per task name: its fields but the payload's
        limit, hooks = self.payload_limit, self.hooks
        for name, args, kwargs in calls:
            base: Any = known.get(name, MISSING) if type(name) is str else None
            if base is MISSING:
                base = known[name] = self._task_fields(name)
            if base is None:
                yield self._spec(name, args, kwargs, NO_OPTIONS)
                continue
            args_json, kwargs_json = encode_payload(
                name, [] if args is None else args, {} if kwargs is None else kwargs, limit
            )
            headers = hooks.headers(name, base.queue) if hooks.enqueue_headers else None
            yield JobSpec.of_fields(
                (name, base.queue, args_json, kwargs_json, None, 0.0, base.priority,
                 base.max_attempts, None, None, headers, None, base.expires_in)
            )  # fmt: skip

    def _task_fields(self, name: str) -> JobSpec | None:
        """What ``_spec`` with no options takes from the task alone (an empty payload in
        place of the call's); None for a task that uses limits (its needs vary by call)."""
        check_name("task", name)
        task = self.tasks.get(name)
        defaults = task.options if task is not None else DEFAULT_OPTIONS
        if defaults.costs:
            return None
        expires_in = defaults.expires_in
        return JobSpec(
            task=name,
            queue=defaults.queue,
            args_json="[]",
            kwargs_json="{}",
            priority=defaults.priority,
            max_attempts=defaults.max_attempts,
            expires_in=None if expires_in is None else float(expires_in),  # type: ignore[arg-type]
        )

    def _spec(
        self,
        name: str,
        args: Sequence[Any] | None,
        kwargs: Mapping[str, Any] | None,
        options: EnqueueOptions,
    ) -> JobSpec:
        if self._settings is None:
            self.configure()
        check_name("task", name)
        task = self.tasks.get(name)
        defaults = task.options if task is not None else DEFAULT_OPTIONS
        args_json, kwargs_json = encode_payload(
            name, [] if args is None else args, {} if kwargs is None else kwargs, self.payload_limit
        )
        o = options  # checked when made: only None stands for "the task's own"
        needs = None
        if task is not None and task.options.costs:
            needs = self._needs(task, args or (), kwargs or {}, o.limit_key)
        elif o.limit_key is not None:
            raise ConfigError(
                f"task {name!r}: limit_key names no partitioned limit of the task "
                "(its partitioned limits: none)"
            )
        queue = defaults.queue if o.queue is None else o.queue
        delay = 0.0 if o.delay is None else delay_seconds(o.delay)
        # expiry (issue 15): this enqueue's expires_at or expires_in, else the task's
        expires_at = None if o.expires_at is None else epoch(o.expires_at, "expires_at")
        expires_in = None if o.expires_in is None else expires_in_seconds(o.expires_in)
        if expires_at is None and expires_in is None and defaults.expires_in is not None:
            expires_in = float(defaults.expires_in)  # type: ignore[arg-type]  # seconds
            check_expiry(delay, None, expires_in, None, " (the task's)")
        return JobSpec(
            task=name,
            queue=queue,
            args_json=args_json,
            kwargs_json=kwargs_json,
            run_at=None if o.run_at is None else epoch(o.run_at),
            delay=delay,
            priority=defaults.priority if o.priority is None else o.priority,
            max_attempts=defaults.max_attempts if o.max_attempts is None else o.max_attempts,
            unique_key=o.unique_key,
            limits=needs,
            headers=self.hooks.headers(name, queue) if self.hooks.enqueue_headers else None,
            expires_at=expires_at,
            expires_in=expires_in,
        )

    # ---- reading -------------------------------------------------------------------
    def get_job(self, job_id: int | str) -> Job:
        """A fresh read of one job from the broker. The id may be its decimal text (from a
        URL, say); JobNotFound if there is no such job (InvalidJobId, a subclass, if the
        text is not an integer's)."""
        return found(self.broker.get_job(job_id), job_id).bound(self)

    # ---- cancelling ----
    def cancel(self, job_id: int | str, by: str | None = None) -> Job:
        """Cancel a job that has not finished; the job as it is now (``cancelled``).

        A job waiting to run never starts. A running one is stopped within a heartbeat
        (lease/3), at once where the broker's notification reaches its worker: an async
        job's coroutine is cancelled; a process pool's child is killed and replaced; a
        thread pool's task sees ``current_job().cancelled`` turn true and must return
        (its slot stays busy until it does). Never retried; whatever the stopped attempt
        returns is refused. Its limit tokens are back at once (a thread that goes on
        uses the dependency beyond its limit until it returns). ``by`` (default:
        user@host) is recorded in its history.
        Raises JobNotFound, or InvalidTransition if it has finished."""
        return self.broker.cancel(job_id, by=by).bound(self)

    # ---- paused queues ----
    def pause_queue(self, name: str, by: str | None = None) -> bool:
        """Stop every worker claiming from queue ``name`` within about a second; running
        jobs finish and enqueue still works. False: it was paused already."""
        return self.broker.pause_queue(name, by)

    def resume_queue(self, name: str) -> bool:
        """Let workers claim from queue ``name`` again. False: it was not paused."""
        return self.broker.resume_queue(name)

    def paused_queues(self) -> dict[str, PausedQueue]:
        """Every paused queue, by name: who paused it (``paused_by``) and when."""
        return self.broker.paused_queues()

    # ---- asyncio producers ----------------------------------------------------------
    # The same checks, encoding and JobSpecs as the sync calls (``_spec``); only the
    # broker's I/O is awaited (``Broker.enqueue_async``). What can block happens once, in
    # a thread: reading the settings file and opening the broker (a migration, a connect).
    async def enqueue_async(
        self,
        name: str,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Unpack[EnqueueOptionsDict],
    ) -> Job:
        """``enqueue``, awaited: same options, checks and errors. ``connection``
        (postgresql broker): a psycopg AsyncConnection with an open transaction."""
        return await self._enqueue_async(name, args, kwargs, EnqueueOptions.of(name, options))

    async def enqueue_many_async(
        self, calls: Iterable[tuple[str, Sequence[Any], Mapping[str, Any]]], connection: Any = None
    ) -> list[Job]:
        """``enqueue_many``, awaited: one transaction, all or nothing. Specs are built in
        slices with a yield to the loop between them, so a large batch never holds it."""
        broker = await self._ready_async()
        specs: list[JobSpec] = []
        for spec in self._specs(calls):
            specs.append(spec)
            if len(specs) % SPEC_SLICE == 0:
                await asyncio.sleep(0)
        return self._enqueued(await broker.enqueue_async(specs, connection=connection), broker)

    async def get_job_async(self, job_id: int | str) -> Job:
        """``get_job``, awaited: a fresh read; JobNotFound (or InvalidJobId) likewise."""
        broker = await self._ready_async()
        return found(await broker.get_job_async(job_id), job_id).bound(self)

    async def aclose(self) -> None:
        """``close`` from an event loop: closes the broker, and the asyncio connections its
        async calls opened in this loop (``close`` closes those too when it can reach their
        loop; call this before the loop ends). Stops the waiting hub, as ``close`` does."""
        if self._waits is not None:  # joins the hub's thread: not on the loop
            await asyncio.to_thread(self._stop_waiting)
        with self._lock:
            broker, self._broker = self._broker, None
        if broker is not None:
            await broker.aclose()

    async def _enqueue_async(
        self,
        name: str,
        args: Sequence[Any] | None,
        kwargs: Mapping[str, Any] | None,
        options: EnqueueOptions,
    ) -> Job:
        broker = await self._ready_async()
        spec = self._spec(name, args, kwargs, options)
        if spec.queue in self.queues or options.max_wait is not None:
            verdict = await asyncio.to_thread(self._verdict, spec, options)
            if verdict.shed:
                return await asyncio.to_thread(self._admit, spec, options)
            job = (await broker.enqueue_async([spec], connection=options.connection))[0]
            self._gate.stored(spec.queue)
            return self._enqueued([job], broker)[0]
        jobs = await broker.enqueue_async([spec], connection=options.connection)
        return self._enqueued(jobs, broker)[0]

    async def _ready_async(self) -> Broker:
        """The broker, with the settings applied; the first call does both in a thread."""
        broker = self._broker
        if broker is not None and self._settings is not None:
            return broker
        return await asyncio.to_thread(self._ready)

    def _ready(self) -> Broker:
        self.configure()
        return self.broker

    # ---- opening from a web app's startup (docs/fastapi.md) ----
    async def open_async(self) -> None:
        """Open the broker (connect, migrate) and apply the settings file now, off the
        loop: a web app's lifespan calls this at startup, so an unreachable broker or a
        bad settings file stops the start, not the first request. Optional: the first
        call does the same. ``aclose`` is its pair."""
        await self._ready_async()

    # ---- waiting for results (job.wait; sluicegate.waiting) ----------------------------
    def wait(self, job_id: int | str, timeout: float | None = None) -> Any:
        """Block until the job finishes; its result. JobFailed if it ended dead (the last
        error's type, message and traceback), JobCancelled, TimeoutError after ``timeout``
        s (None: no limit; negative or NaN: ValueError), JobNotFound if there is no such
        job. Every waiter of this app shares one subscription and one query per wake-up."""
        return self._waiting().wait(job_id, timeout)

    async def wait_async(self, job_id: int | str, timeout: float | None = None) -> Any:
        """``wait`` for asyncio: never blocks the event loop."""
        return await self._waiting().wait_async(job_id, timeout)

    def _waiting(self) -> Waits:
        from .waiting import Waits

        broker = self.broker
        with self._lock:
            if self._waits is None or self._waits.broker is not broker:
                self._waits = Waits(broker)
            return self._waits

    def _stop_waiting(self) -> None:
        with self._lock:
            waits, self._waits = self._waits, None
        if waits is not None:
            waits.close()

    # ---- hooks (sluicegate.hooks; docs/hooks.md) ----------------------------------------
    def hook(self, kind: str) -> Callable[[F], F]:
        """Register a lifecycle hook: ``@app.hook("before_job")``. The kinds and their
        arguments are in docs/hooks.md; an unknown kind is a ConfigError."""
        check_kind(kind)  # now, not when the decorator is applied

        def register(fn: F) -> F:
            return self.hooks.add(kind, fn)

        return register

    def enqueue_headers(self, fn: F) -> F:
        """``fn(task, queue) -> dict[str, str] | None``: headers stored with each job,
        before the broker stores it (``job.headers``; trace context, say)."""
        return self.hooks.add("enqueue_headers", fn)

    def on_enqueue(self, fn: F) -> F:
        """``fn(job)`` after the broker stored each job enqueued through this app."""
        return self.hooks.add("on_enqueue", fn)

    def before_job(self, fn: F) -> F:
        """``fn(job)`` just before each attempt's task is called, where it runs."""
        return self.hooks.add("before_job", fn)

    def after_job(self, fn: F) -> F:
        """``fn(job, outcome)`` when each attempt ends, whatever its outcome."""
        return self.hooks.add("after_job", fn)

    def on_retry(self, fn: F) -> F:
        """``fn(job, outcome)`` after an attempt that will be retried (``Retried``)."""
        return self.hooks.add("on_retry", fn)

    def on_dead(self, fn: F) -> F:
        """``fn(job, outcome)`` after an attempt that ends the job dead (``Buried``)."""
        return self.hooks.add("on_dead", fn)

    def on_worker_start(self, fn: F) -> F:
        """``fn(worker)`` in a worker process before it claims its first job."""
        return self.hooks.add("on_worker_start", fn)

    def on_worker_stop(self, fn: F) -> F:
        """``fn(worker)`` in a worker process once it has stopped."""
        return self.hooks.add("on_worker_stop", fn)

    def _enqueued(self, jobs: list[Job], broker: Broker | None = None) -> list[Job]:
        """The stored jobs, bound to this app; each one's on_enqueue hooks called. Jobs
        only the caller holds (from ``broker``, whose ``fresh_jobs`` says so) are bound in
        place, others copied."""
        if broker is not None and broker.fresh_jobs:
            for job in jobs:
                job.bind(self)
            bound = jobs
        else:
            bound = [job.bound(self) for job in jobs]
        if self.hooks.on_enqueue:
            for job in bound:
                self.hooks.fire("on_enqueue", job)
        return bound

    # ---- periodic jobs (issue 15, part 3; docs/schedules.md) ----
    @property
    def schedules(self) -> dict[str, Schedule]:
        """Periodic schedules by name: ``@app.periodic`` ones, and after ``configure`` the
        settings file's ``[schedules.NAME]`` (a file's schedule replaces one of its name)."""
        found: dict[str, Schedule] | None = self.__dict__.get("_schedules")
        if found is None:
            found = self.__dict__.setdefault("_schedules", {})
        return found

    def periodic(
        self,
        cron: str,
        *,
        tz: str = "UTC",
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        queue: str | None = None,
        name: str | None = None,
        catch_up: int = 0,
    ) -> Callable[[TaskT], TaskT]:
        """Run a task at each tick of ``cron`` (5 fields, or 6 with seconds first), read in
        time zone ``tz``; every worker's scheduler enqueues each tick once across the
        cluster. Stacked above ``@app.task``; stack several (with distinct ``name``s) for
        several schedules of one task. ``name`` defaults to the task's; ``catch_up``: how
        many missed ticks to enqueue after a gap with no worker (0: skip them)."""

        def register(task: TaskT) -> TaskT:
            if not isinstance(task, Task):
                raise ConfigError(
                    f"@app.periodic({cron!r}) decorates a task: put it above @app.task "
                    f"(got {task!r})"
                )
            schedule = Schedule.of(
                task.name if name is None else name, task.name, cron, tz=tz, args=args,
                kwargs=kwargs, queue=queue, catch_up=catch_up,
            )  # fmt: skip
            if schedule.name in self.schedules:
                raise ConfigError(
                    f"schedule {schedule.name!r} is declared twice: give each one a name="
                )
            self.schedules[schedule.name] = schedule
            return task

        return register

    def _configure_schedules(self, found: TaskSettings) -> None:
        merged = {**self.schedules, **found.schedules}
        for schedule in merged.values():
            if schedule.task not in self.tasks:
                known = ", ".join(sorted(self.tasks)) or "none"
                where = (
                    f"{found.source}: schedules.{schedule.name}: "
                    if (schedule.name in found.schedules)
                    else f"schedule {schedule.name!r}: "
                )
                raise ConfigError(f"{where}task {schedule.task!r} is not a task of the app "
                                  f"(tasks: {known})")  # fmt: skip
        self.schedules.clear()
        self.schedules.update(merged)

    # ---- admission: bounded queues (sluicegate.admission; docs/admission.md) -------------
    def queue(
        self,
        name: str,
        *,
        max_ready: int | None = None,
        max_wait: float | None = None,
        policy: str = "refuse",
    ) -> QueueBounds:
        """Bound queue ``name``: at most ``max_ready`` ready jobs, or a predicted wait of at
        most ``max_wait`` s; past a bound, enqueue raises QueueFull (``policy="refuse"``)
        or cancels the ready job that would start last (``"shed"``). A settings file's
        ``[queues.NAME]`` table wins over the code."""
        bounds = QueueBounds(name, max_ready, max_wait, policy)  # type: ignore[arg-type]
        self.queues[name] = bounds
        return bounds

    def _verdict(self, spec: JobSpec, options: EnqueueOptions) -> Verdict:
        task = self.tasks.get(spec.task)
        costs = task.options.costs if task is not None else ()
        bounds = self.queues.get(spec.queue)
        return self._gate.check(self.broker, spec, bounds, options.max_wait, costs, self.limits)

    def _admit(self, spec: JobSpec, options: EnqueueOptions) -> Job:
        """Enqueue ``spec`` past its queue's bounds: QueueFull, or shed one job first."""
        verdict = self._verdict(spec, options)
        if verdict.shed and shed_one(self.broker, spec) is None:
            raise shed_refused(spec, verdict, self.queues[spec.queue])
        broker = self.broker
        job = broker.enqueue([spec], connection=options.connection)[0]
        if not verdict.shed:  # a shed one made the room this one takes
            self._gate.stored(spec.queue)
        return self._enqueued([job], broker)[0]

    def predicted_wait(self, queue: str, task: str | None = None) -> float | None:
        """Seconds a job enqueued in ``queue`` now would wait to start, from the figures
        admission uses (cached for a second); None while no duration is observed."""
        if self._settings is None:
            self.configure()
        found = self.tasks.get(task) if task is not None else None
        costs = found.options.costs if found is not None else ()
        return self._gate.estimate(self.broker, queue, costs, self.limits).predicted_wait
