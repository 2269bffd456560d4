"""The concurrency models, one table: a pool names its model by key.

A new model is one module (its work item, its executor and a ``ConcurrencyModel``
subclass) and one entry here. Nothing else in the package tests a model's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from .aio import AsyncModel
from .base import ConcurrencyModel, ModelOption, ModelOptionError, PoolContext
from .process import ProcessModel
from .thread import ThreadModel

MODELS: dict[str, type[ConcurrencyModel]] = {
    model.name: model for model in (ThreadModel, AsyncModel, ProcessModel)
}


def get_model(name: str) -> type[ConcurrencyModel]:
    """The model called ``name``; ConfigError listing the available ones if none is."""
    model = MODELS.get(name)
    if model is None:
        raise ConfigError(f"unknown model {name!r} (available: {', '.join(MODELS)})")
    return model


def validate_model_options(model_name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` checked against what the model declares, with defaults filled in.

    ConfigError for an unknown model; ModelOptionError (a ConfigError) naming the option
    and the problem for an option the model does not have or a bad value."""
    model = get_model(model_name)
    declared = {option.name: option for option in model.options}
    for key in options:
        if key not in declared:
            have = f"options: {', '.join(declared)}" if declared else "no options"
            raise ModelOptionError(
                model_name, key, f"unknown option ({model_name} pools have {have})"
            )
    checked: dict[str, Any] = {}
    for option in model.options:
        value = options.get(option.name)
        problem = option.problem(value)
        if problem is not None:
            raise ModelOptionError(model_name, option.name, problem)
        checked[option.name] = option.default if value is None else value
    return checked


__all__ = [
    "MODELS",
    "ConcurrencyModel",
    "ModelOption",
    "ModelOptionError",
    "PoolContext",
    "get_model",
    "validate_model_options",
]
