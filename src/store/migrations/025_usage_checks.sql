-- What reconciliation compares the usage meter with (docs/billing.md, Reconciliation), by tenant,
-- the period a request was served in (never moved by a close, unlike usage_period_units) and
-- meter: the units served; of them, those a limit charged, those under no limit, and those flushed
-- after the period closed (billed in a later one, as its late_units); and the units of forwarded
-- requests whose request log records were dropped. Written by the meter's flush, in the same
-- statement and batch as usage_period_units.
create table usage_period_checks (
  tenant_id         uuid not null references tenants (id),
  period_start      timestamptz not null,
  meter             text not null check (meter ~ '^[a-z][a-z0-9_]{0,31}$'),
  served_units      bigint not null default 0 check (served_units >= 0),
  limiter_units     bigint not null default 0 check (limiter_units >= 0),
  unlimited_units   bigint not null default 0 check (unlimited_units >= 0),
  late_out_units    bigint not null default 0 check (late_out_units >= 0),
  log_dropped_units bigint not null default 0 check (log_dropped_units >= 0),
  primary key (tenant_id, period_start, meter)
);

-- Units counted before this table: served in the period that holds them, less its late units (none
-- moved late yet, or few). Whether a limit charged them is unknown: they count as under none
-- (reconciliation's `not_limited`), never as a fault.
insert into usage_period_checks (tenant_id, period_start, meter, served_units, unlimited_units)
select tenant_id, period_start, meter, units - late_units, units - late_units from usage_period_units;
