-- Paused queues (docs/operations.md, "Pausing a queue"): one row per paused queue. Workers
-- read this tiny table about once a second (and on a wake-up) and leave paused queues out
-- of their claims; the claim itself never reads it. Enqueue ignores it.
CREATE TABLE paused_queues (
    queue      TEXT PRIMARY KEY,
    paused_by  TEXT NOT NULL,   -- who paused it (free text: user@host by default)
    paused_at  REAL NOT NULL    -- unix seconds
);
