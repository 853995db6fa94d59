-- Limits and quotas (docs/api.md, Limits and quotas). A tenant's limits, as the API shows them:
-- {"rate": {"requests": N, "per_seconds": W} | null, "monthly_quota": {"requests": M} | null};
-- null when it has none (the gateway never stores an object whose two members are null).
alter table tenants add column limits jsonb
  check (limits is null or jsonb_typeof(limits) = 'object');

-- Usage counts that tell what the gateway forwarded apart from what it refused
-- (docs/decisions/0049-usage-counts-for-quotas.md). On each (tenant, day, status class) row beside
-- `requests`:
--   forwarded      of those requests, the ones sent on to an upstream: what a monthly quota counts;
--   limited_rate   429s of a rate limit, and limited_quota of a monthly quota (both on the 4xx row).
-- Constant defaults: Postgres adds the columns without rewriting the table. The check is NOT VALID
-- so that adding it does not scan a large table under its lock; every row there holds 0, and new
-- and updated rows are checked all the same.
alter table usage_daily
  add column forwarded     bigint not null default 0,
  add column limited_rate  bigint not null default 0,
  add column limited_quota bigint not null default 0;
alter table usage_daily add constraint usage_daily_counts_not_negative
  check (forwarded >= 0 and limited_rate >= 0 and limited_quota >= 0) not valid;
