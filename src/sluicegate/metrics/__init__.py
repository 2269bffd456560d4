"""Signals: what tells an operator whether a budget is right (docs/metrics.md).

Each worker keeps its figures in memory (``recorder``), publishes a compact snapshot
(``schema``) through the broker with its registry heartbeat, and any machine folds the
snapshots into the whole system's view (``cluster``) and its last hour by minute
(``history``, from each worker's ``minutes``), sizes pools from them (``sizing``) and
exports them to Prometheus (``prometheus``). Nothing here does broker I/O.
"""
