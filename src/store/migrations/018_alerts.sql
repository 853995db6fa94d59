-- Alerts (docs/events.md, Alerts): events the gateway writes of its own accord, each exactly once
-- however many replicas see its cause. Postgres decides: the replica whose insert of the mark wins
-- writes the event in the same transaction; the others' inserts do nothing.
--
-- One row per alert written once: a quota's threshold in a month (`usage.threshold_reached`,
-- subject `<policy>:<tenant id>`, mark `2026-11:80`) and a key's mark before its expiry
-- (`api_key.expiring`, subject the key's id, mark `7d`). Deleted after 40 days (alerts/plugin.ts),
-- once no month or key they name can see them again.
create table alert_marks (
  kind        text not null,
  subject     text not null,
  mark        text not null,
  created_at  timestamptz not null default now(),
  primary key (kind, subject, mark)
);
create index alert_marks_created on alert_marks (created_at);

-- `rate_limit.exceeded`, at most one per tenant and rate policy per window: the refusals every
-- replica adds that no event has reported yet, and when the last event was written (the alerts'
-- clock). The row's lock orders replicas: whoever finds the window over writes the event.
create table rate_limit_alerts (
  tenant_id      uuid not null,
  policy         text not null,
  refused        bigint not null default 0,
  -- The previous event's time, or the first refusal added since the row was made.
  counting_since timestamptz not null,
  last_event_at  timestamptz,
  primary key (tenant_id, policy)
);

-- The sweep of expiring keys (alerts/key-expiry-alerts.ts) reads the active keys expiring within
-- 7 days, and whether each has a successor: both by index, not a scan of every key.
create index api_keys_active_expiry on api_keys (expires_at) where status = 'active' and expires_at is not null;
create index api_keys_rolled_from on api_keys (rolled_from) where rolled_from is not null;
