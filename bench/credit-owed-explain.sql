-- What the usage flush's credit_owed step (src/store/usage.ts) costs Postgres with many sub-accounts:
-- 100 parents with a default plan naming a credit, 20,000 sub-accounts, a batch of 5,000 (sub-account,
-- meter) rows; the plan found through a correlated subquery of the parent (before) and a join (now).
-- Run on a migrated database of its own; everything is rolled back but the sequences, which a
-- rollback does not move back: never on the tests' template (tgw_template_*), whose copies would
-- then number tenants from 20,101:
--   createdb -h 127.0.0.1 -U postgres explain_owed && DATABASE_URL=postgres://postgres@127.0.0.1/explain_owed npm run --silent cli -- migrate
--   psql -h 127.0.0.1 -U postgres -d explain_owed -f bench/credit-owed-explain.sql | grep -E 'step|Execution Time|^ +Buffers'
begin;
insert into tenants (id, name) select ('00000000-0000-0000-0000-' || lpad(i::text, 12, '0'))::uuid, 'p' || i from generate_series(1, 100) i;
insert into plans (id, account_id, name, limits) select ('10000000-0000-0000-0000-' || lpad(i::text, 12, '0'))::uuid, ('00000000-0000-0000-0000-' || lpad(i::text, 12, '0'))::uuid, 'plan', '{"credits": {"tokens": {"required": true, "low_threshold_percent": 10}}}' from generate_series(1, 100) i;
update tenants set default_plan_id = ('10000000' || substr(id::text, 9))::uuid;
insert into tenants (parent_id, name) select ('00000000-0000-0000-0000-' || lpad((1 + i % 100)::text, 12, '0'))::uuid, 's' || i from generate_series(1, 20000) i;
analyze;
\echo step: before (a subquery per row)
explain (analyze, buffers, costs off)
with credit_use as (
  select id as tenant_id, 'tokens'::text as meter, 100::bigint as units, now() as period_start from tenants where parent_id is not null limit 5000
), credit_order as (
  select null::uuid as sub_account_id, null::text as meter, 0::bigint as units_left where false
)
select u.tenant_id, u.meter, u.units - coalesce(sum(o.units_left), 0)
      from credit_use u
      join tenants t on t.id = u.tenant_id
      left join plans p on p.id = coalesce(t.plan_id, (select d.default_plan_id from tenants d where d.id = t.parent_id))
      left join credit_order o on o.sub_account_id = u.tenant_id and o.meter = u.meter
      where t.limits -> 'credits' ? u.meter or p.limits -> 'credits' ? u.meter
      group by u.tenant_id, u.meter, u.units
      having u.units > coalesce(sum(o.units_left), 0)
      order by 1, 2;
\echo step: now (a join)
explain (analyze, buffers, costs off)
with credit_use as (
  select id as tenant_id, 'tokens'::text as meter, 100::bigint as units, now() as period_start from tenants where parent_id is not null limit 5000
), credit_order as (
  select null::uuid as sub_account_id, null::text as meter, 0::bigint as units_left where false
)
select u.tenant_id, u.meter, u.units - coalesce(sum(o.units_left), 0)
      from credit_use u
      join tenants t on t.id = u.tenant_id
      left join tenants d on d.id = t.parent_id left join plans p on p.id = coalesce(t.plan_id, d.default_plan_id)
      left join credit_order o on o.sub_account_id = u.tenant_id and o.meter = u.meter
      where t.limits -> 'credits' ? u.meter or p.limits -> 'credits' ? u.meter
      group by u.tenant_id, u.meter, u.units
      having u.units > coalesce(sum(o.units_left), 0)
      order by 1, 2;
rollback;
