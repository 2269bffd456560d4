"""sluicegate: durable job queues and bounded pools that protect the dependencies behind them."""

from .app import App
from .errors import (
    BrokerUnavailable,
    ConfigError,
    InvalidJobId,
    InvalidTransition,
    JobNotFound,
    LeaseLost,
    SerializationError,
    SluicegateError,
    UnknownTask,
)
from .job import ErrorInfo, Job, JobId, JobState
from .task import Task

__all__ = [
    "App",
    "BrokerUnavailable",
    "ConfigError",
    "ErrorInfo",
    "InvalidJobId",
    "InvalidTransition",
    "Job",
    "JobId",
    "JobNotFound",
    "JobState",
    "LeaseLost",
    "SerializationError",
    "SluicegateError",
    "Task",
    "UnknownTask",
]

__version__ = "0.1.0"
