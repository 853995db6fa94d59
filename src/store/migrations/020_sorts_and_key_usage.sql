-- The sub-accounts list sorted by name (docs/api.md, Sub-accounts, `sort`): its keyset is
-- (lower(name), seq), in the database's own collation, so that a page is read from the index in
-- order, both ways, instead of sorting every sub-account of the parent. (Migration 016's index on
-- lower(name) uses text_pattern_ops, which serves a prefix search but not an ORDER BY.)
create index tenants_parent_lower_name_seq on tenants (parent_id, lower(name), seq)
  where parent_id is not null;

-- Requests per tenant acted as, calling key, UTC day and status class: the usage by key of a
-- sub-account (docs/api.md, Usage by key). The meter writes it in the same statement as
-- usage_daily, under the same batch id, so the two never disagree about a flush. A parent key that
-- acts as a sub-account counts there too, under the sub-account. Its primary key serves the report's
-- read (one sub-account, a range of days).
create table usage_daily_keys (
  tenant_id    uuid not null references tenants (id),
  -- No foreign key: a key id the meter was handed must never make a whole flush (every tenant's
  -- counts) fail again and again; the report joins api_keys for the names.
  key_id       uuid not null,
  day          date not null,
  status_class smallint not null check (status_class between 2 and 5),
  requests     bigint not null check (requests >= 0),
  primary key (tenant_id, day, key_id, status_class)
);
