-- Closed usage periods (docs/billing.md): a period closes once every live replica has flushed past
-- its end plus a grace, and never changes after; units flushed for it later go to the first open
-- period, counted as late.

-- Each replica's last flush: everything it counted before `flushed_through` (its own clock) is in
-- Postgres. `seen_at` is Postgres's clock: a replica not seen for 120 s is no longer waited for.
create table usage_flush_marks (
  replica_id      uuid primary key,
  flushed_through timestamptz not null,
  seen_at         timestamptz not null default now()
);

-- One row: periods that start before `closed_until` are closed (null: none yet). A flush reads it
-- FOR SHARE and the closer updates it, so a flush and a close never pass each other.
create table usage_close (
  id             boolean primary key default true check (id),
  closed_until   timestamptz,
  closed_at      timestamptz,
  -- The periods' length (USAGE_PERIOD_SECONDS), set by the first close and fixed from then on.
  period_seconds integer check (period_seconds between 60 and 86400)
);
insert into usage_close (id) values (true);

-- Of a period's units, those that a replica flushed after their own period had closed.
alter table usage_period_units add column late_units bigint not null default 0 check (late_units >= 0);

-- The export and its push read closed periods across tenants, in this order.
create index usage_period_units_period on usage_period_units (period_start, tenant_id, meter);
