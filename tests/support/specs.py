"""One way to build a job spec in tests: the conformance suite's ``spec`` (task ``t``,
queue ``q``, JSON-encoded args and kwargs, any other JobSpec field by keyword), and
``needing`` for a spec that needs dependency limits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sluicegate.job import JobSpec
from sluicegate.limits import Need, encode_needs
from sluicegate.testing.conformance.helpers import spec

__all__ = ["needing", "spec"]


def needing(needs: Sequence[Need], **fields: Any) -> JobSpec:
    """A spec (fields as for ``spec``) that needs ``needs`` (name, key, amount)."""
    return spec(limits=encode_needs(list(needs)), **fields)
