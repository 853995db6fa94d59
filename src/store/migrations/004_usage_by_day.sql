-- The usage report over a range with little or no usage (last year's month, a quiet parent)
-- otherwise scans every usage row: 477 ms at 100,000 sub-accounts for an empty month, 0.1 ms
-- with this index (bench/RESULTS.md at e5da086). On a large live table, create it CONCURRENTLY by hand first;
-- this then does nothing.
create index if not exists usage_daily_day_tenant on usage_daily (day, tenant_id);
