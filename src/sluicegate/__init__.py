"""sluicegate: durable job queues and bounded pools that protect the dependencies behind them."""

from .app import App
from .errors import (
    BrokerBusy,
    BrokerUnavailable,
    ConfigError,
    EnqueueFateUnknown,
    InvalidJobId,
    InvalidTransition,
    JobCancelled,
    JobFailed,
    JobNotFound,
    LeaseLost,
    SerializationError,
    SluicegateError,
    StorageFull,
    UnknownTask,
)
from .job import ErrorInfo, Job, JobId, JobState
from .task import Task

__all__ = [
    "App",
    "BrokerBusy",
    "BrokerUnavailable",
    "ConfigError",
    "EnqueueFateUnknown",
    "ErrorInfo",
    "InvalidJobId",
    "InvalidTransition",
    "Job",
    "JobCancelled",
    "JobFailed",
    "JobId",
    "JobNotFound",
    "JobState",
    "LeaseLost",
    "SerializationError",
    "SluicegateError",
    "StorageFull",
    "Task",
    "UnknownTask",
]

__version__ = "0.1.0"
