"""JSON payloads (never pickle) with a size limit and errors that name the argument."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import SerializationError

DEFAULT_PAYLOAD_LIMIT = 1024 * 1024

_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_decoder = json.JSONDecoder()


def dumps(value: Any) -> str:
    return _encoder.encode(value)


def loads(text: str) -> Any:
    if text == "{}":  # the common empty kwargs: skip the decoder
        return {}
    return _decoder.decode(text)


def _why(value: Any) -> str:
    try:
        _encoder.encode(value)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return "not JSON"


def _find_bad(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    for index, value in enumerate(args):
        try:
            _encoder.encode(value)
        except (TypeError, ValueError):
            return f"argument {index} ({_why(value)})"
    for key, value in kwargs.items():
        if not isinstance(key, str):
            return f"keyword {key!r} (keyword names must be strings)"
        try:
            _encoder.encode(value)
        except (TypeError, ValueError):
            return f"keyword argument {key!r} ({_why(value)})"
    return "arguments"


def encode_payload(
    task: str, args: Sequence[Any], kwargs: Mapping[str, Any], limit: int = DEFAULT_PAYLOAD_LIMIT
) -> tuple[str, str]:
    """Encode args and kwargs as JSON, or raise SerializationError naming the bad argument."""
    if type(args) not in (list, tuple) and (
        isinstance(args, str | bytes) or not isinstance(args, Sequence)
    ):
        raise SerializationError(f"task {task!r}: args must be a list, not {type(args).__name__}")
    if type(kwargs) is not dict and not isinstance(kwargs, Mapping):
        raise SerializationError(
            f"task {task!r}: kwargs must be an object, not {type(kwargs).__name__}"
        )
    if kwargs and not all(
        isinstance(key, str) for key in kwargs
    ):  # JSON would quietly stringify them
        raise SerializationError(f"task {task!r}: {_find_bad((), kwargs)} is not JSON-serializable")
    try:
        args_json = _encoder.encode(args if type(args) is list else list(args))
        kwargs_json = _encoder.encode(dict(kwargs)) if kwargs else "{}"
    except (TypeError, ValueError):
        raise SerializationError(
            f"task {task!r}: {_find_bad(args, kwargs)} is not JSON-serializable"
        ) from None
    # Characters never outnumber UTF-8 bytes: only near the limit is the exact count needed.
    size = len(args_json) + len(kwargs_json)
    if size * 4 > limit:
        size = len(args_json.encode()) + len(kwargs_json.encode())
    if size > limit:
        raise SerializationError(
            f"task {task!r}: payload is {size} bytes, over the limit of {limit} bytes"
        )
    return args_json, kwargs_json


def encode_result(value: Any, limit: int = DEFAULT_PAYLOAD_LIMIT) -> str:
    try:
        text = _encoder.encode(value)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"result is not JSON-serializable: {exc}") from None
    size = len(text.encode())
    if size > limit:
        raise SerializationError(f"result is {size} bytes, over the limit of {limit} bytes")
    return text
