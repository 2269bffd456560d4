-- Job progress (README, "Job progress"): a running attempt's latest report, as JSON text
-- {"fraction": 0.4, "message": "2 of 5", "at": <broker clock>}, written by the worker's
-- batched heartbeat and kept on the finished job. NULL until a task reports. No index,
-- no default: adding the column rewrites nothing, whatever the table's size.
ALTER TABLE {schema}.jobs ADD COLUMN progress text;
