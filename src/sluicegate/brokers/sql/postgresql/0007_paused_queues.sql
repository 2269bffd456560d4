-- Paused queues (docs/operations.md, "Pausing a queue"): one row per paused queue. Workers
-- read this tiny table about once a second (and on a wake-up) and leave paused queues out
-- of their claims; the claim itself never reads it. Enqueue ignores it.
CREATE TABLE {schema}.paused_queues (
    queue      text        PRIMARY KEY,
    paused_by  text        NOT NULL,   -- who paused it (free text: user@host by default)
    paused_at  timestamptz NOT NULL DEFAULT now()
);
