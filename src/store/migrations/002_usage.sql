-- Requests per tenant, UTC day and status class (docs/api.md). The meter adds its in-memory counts
-- here about once a second, in one multi-row upsert.
create table usage_daily (
  tenant_id    uuid not null references tenants (id),
  day          date not null,
  -- 2 for 2xx … 5 for 5xx.
  status_class smallint not null check (status_class between 2 and 5),
  requests     bigint not null check (requests >= 0),
  primary key (tenant_id, day, status_class)
);
