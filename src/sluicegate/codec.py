"""JSON payloads (never pickle) with a size limit and errors that name the argument.

What is stored is text every broker can hold: JSON without NaN or Infinity, and valid
Unicode (a lone surrogate, such as ``"\\ud800"``, cannot be written as UTF-8, so it is
refused here rather than by SQLite or PostgreSQL later). NUL characters are fine inside
JSON (escaped as ``\\u0000``). Values nest as deep as Python's recursion limit lets the
encoder go (about 900 levels); deeper ones are refused by name.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import SerializationError

DEFAULT_PAYLOAD_LIMIT = 1024 * 1024
TOO_DEEP = "nested too deeply (JSON values may nest about 900 levels)"

_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_decoder = json.JSONDecoder()
# The same encoding by the C encoder, made once: ``_encoder.encode`` makes one per call.
# Without the circular-reference check (its table would be shared between threads); a
# cycle recurses until RecursionError, and every failure is encoded again by ``_encoder``,
# which raises exactly what it always raised.
_make_encoder = getattr(json.encoder, "c_make_encoder", None)  # CPython's C encoder
_fast_encoder = (
    None
    if _make_encoder is None
    else _make_encoder(None, _encoder.default, json.encoder.encode_basestring, None, ":", ",",
                       False, False, False)
)  # fmt: skip
_scan_once = _decoder.scan_once  # type: ignore[attr-defined]  # set by JSONDecoder()


def dumps(value: Any) -> str:
    return _encoder.encode(value)


def loads(text: str) -> Any:
    """Decode JSON text. Text nested deeper than this thread's stack allows is decoded
    again on a fresh thread (a worker decodes deeper in its stack than the producer that
    encoded it); ValueError if even that fails, as for any undecodable text."""
    if text == "{}":  # the common empty kwargs: skip the decoder
        return {}
    try:
        return _decoder.decode(text)
    except RecursionError:
        return _decode_on_fresh_stack(text)


def loads_own(text: str) -> Any:
    """Decode JSON text that ``encode_payload`` just wrote (compact, valid, nothing after
    the value): read by the decoder's C scanner alone, without the checks that text from
    storage needs. Anything unexpected goes through ``loads``."""
    try:
        value, end = _scan_once(text, 0)
    except (RecursionError, ValueError, StopIteration):
        return loads(text)
    return value if end == len(text) else loads(text)


def _decode_on_fresh_stack(text: str) -> Any:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(_try_decode(text)), daemon=True)
    thread.start()
    thread.join()
    if not out or isinstance(out[0], RecursionError):
        raise ValueError(f"JSON text {TOO_DEEP}") from None
    if isinstance(out[0], ValueError):
        raise out[0]
    return out[0]


def _try_decode(text: str) -> Any:
    try:
        return _decoder.decode(text)
    except (RecursionError, ValueError) as exc:
        return exc


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as a plain text column (a key, a partition value), or
    None: a NUL character (PostgreSQL text refuses it) or a lone surrogate (not UTF-8)."""
    if "\x00" in text:
        return "contains a NUL character"
    return None if _is_utf8(text) else "contains a lone surrogate (not valid Unicode)"


def _is_utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _encode(value: Any) -> str:
    """JSON text of ``value`` that every broker can store; ValueError or TypeError (with
    the reason) if there is none."""
    try:
        text = "".join(_fast_encoder(value, 0)) if _fast_encoder is not None else ""
    except Exception:
        text = ""  # encoded again below: the error, if any, is the plain encoder's
    if not text:
        try:
            text = _encoder.encode(value)
        except RecursionError:
            raise ValueError(TOO_DEEP) from None
    if not _is_utf8(text):
        raise ValueError("a string holds a lone surrogate (not valid Unicode)")
    return text


def _find_bad(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    for index, value in enumerate(args):
        try:
            _encode(value)
        except (TypeError, ValueError) as exc:
            return f"argument {index} ({exc})"
    for key, value in kwargs.items():
        if not isinstance(key, str):
            return f"keyword {key!r} (keyword names must be strings)"
        try:
            _encode(key)
            _encode(value)
        except (TypeError, ValueError) as exc:
            return f"keyword argument {key!r} ({exc})"
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
        args_json = _encode(args if type(args) is list else list(args))
        kwargs_json = _encode(dict(kwargs)) if kwargs else "{}"
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
        text = _encode(value)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"result is not JSON-serializable: {exc}") from None
    size = len(text.encode())
    if size > limit:
        raise SerializationError(f"result is {size} bytes, over the limit of {limit} bytes")
    return text
