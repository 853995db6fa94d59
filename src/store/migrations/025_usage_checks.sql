-- What reconciliation compares the usage meter with (docs/billing.md, Reconciliation), by tenant,
-- the period a request was served in (never moved by a close, unlike usage_period_units) and
-- meter: the units served; of them, those a limit charged and those under no limit; and the units
-- of forwarded requests whose request log records were dropped. Written by the meter's flush, in
-- the same statement and batch as usage_period_units.
create table usage_period_checks (
  tenant_id         uuid not null references tenants (id),
  period_start      timestamptz not null,
  meter             text not null check (meter ~ '^[a-z][a-z0-9_]{0,31}$'),
  served_units      bigint not null default 0 check (served_units >= 0),
  limiter_units     bigint not null default 0 check (limiter_units >= 0),
  unlimited_units   bigint not null default 0 check (unlimited_units >= 0),
  log_dropped_units bigint not null default 0 check (log_dropped_units >= 0),
  primary key (tenant_id, period_start, meter)
);

-- Units counted before this table were served in the period that holds them (none had closed late
-- yet, or few): their limiter and request log counts are unknown, so nothing is said of them.
insert into usage_period_checks (tenant_id, period_start, meter, served_units)
select tenant_id, period_start, meter, units - late_units from usage_period_units;
