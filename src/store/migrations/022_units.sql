-- Units (docs/api.md, Units): what every forwarded request counted for, by meter. `requests` is
-- the request units a route's cost weighs; any other meter holds what upstreams reported. The
-- meter writes both tables in the same statement as usage_daily, under the same batch id.

-- By tenant acted as, usage period (an hour by default; USAGE_PERIOD_SECONDS) and meter: the
-- usage report's units by day, and the periods a billing export closes. `requests` counts the
-- forwarded requests that counted the units (for a reported meter: those that reported it).
create table usage_period_units (
  tenant_id    uuid not null references tenants (id),
  period_start timestamptz not null,
  meter        text not null check (meter ~ '^[a-z][a-z0-9_]{0,31}$'),
  units        bigint not null check (units >= 0),
  requests     bigint not null check (requests >= 0),
  primary key (tenant_id, period_start, meter)
);

-- By tenant acted as, UTC day, calling key and meter: the usage by key's units. No foreign key on
-- the key, as usage_daily_keys has none.
create table usage_daily_key_units (
  tenant_id uuid not null references tenants (id),
  day       date not null,
  key_id    uuid not null,
  meter     text not null check (meter ~ '^[a-z][a-z0-9_]{0,31}$'),
  units     bigint not null check (units >= 0),
  primary key (tenant_id, day, key_id, meter)
);

-- The request units of the usage counted before this migration: every forwarded request at cost 1,
-- at its day's first period. Monthly quotas count request units from here on (limits/store.ts).
insert into usage_period_units (tenant_id, period_start, meter, units, requests)
select tenant_id, day::timestamp at time zone 'UTC', 'requests', sum(forwarded), sum(forwarded)
from usage_daily
group by tenant_id, day
having sum(forwarded) > 0;
