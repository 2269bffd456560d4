-- Job headers (docs/hooks.md, "Headers"): string pairs stored with the job when it is
-- enqueued, as JSON text {"traceparent": "00-..."}; the W3C trace context of the
-- enqueue (sluicegate.otel) travels here. NULL: none. No index, no default: adding the
-- column rewrites nothing, whatever the table's size.
ALTER TABLE jobs ADD COLUMN headers TEXT;
