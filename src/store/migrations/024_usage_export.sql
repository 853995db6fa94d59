-- The usage export's push (docs/billing.md): per receiver (the SHA-256 of USAGE_EXPORT_URL, never
-- the URL itself, which may carry a token), the last record it acknowledged, its retries, and the
-- replica that exports to it (one at a time, for as long as its lease runs).
create table usage_export_cursors (
  target          text primary key,
  -- The last acknowledged record, in (period_start, tenant_id, meter) order; null: none yet.
  period_start    timestamptz,
  tenant_id       uuid,
  meter           text,
  acknowledged_at timestamptz,
  -- Failed attempts since the last acknowledged one, and when the next may go.
  attempts        integer not null default 0,
  next_attempt_at timestamptz,
  last_error      text,
  holder          uuid,
  lease_until     timestamptz
);
