-- Plans (docs/api.md, Plans): limits and a key policy a parent account defines once and gives to
-- many sub-accounts. A sub-account's `plan_id` names its plan; a parent's `default_plan_id` the plan
-- of its sub-accounts without one. Both are references: a plan in use cannot be deleted (the API
-- answers 409 plan_in_use first; the foreign keys hold it against a race with an assignment).
create table plans (
  id          uuid primary key default gen_random_uuid(),
  -- Insertion order, for keyset paging ("oldest first"), as the other lists page.
  seq         bigint generated always as identity unique,
  account_id  uuid not null references tenants (id),
  name        text not null,
  -- The shapes of tenants.limits and tenants.key_policy; null: none of its kind.
  limits      jsonb check (limits is null or jsonb_typeof(limits) = 'object'),
  key_policy  jsonb check (key_policy is null or jsonb_typeof(key_policy) = 'object'),
  metadata    jsonb not null default '{}'::jsonb,
  created_at  timestamptz not null default now(),
  updated_at  timestamptz not null default now()
);
create index plans_account_seq on plans (account_id, seq);

alter table tenants
  add column plan_id         uuid references plans (id),
  add column default_plan_id uuid references plans (id);
-- Whether a plan is in use (a delete's check, and the foreign keys' own on a plan's delete).
create index tenants_plan_id on tenants (plan_id) where plan_id is not null;
create index tenants_default_plan_id on tenants (default_plan_id) where default_plan_id is not null;

-- A sub-account's effective limits and key policy, as the API shows them in the events a change
-- writes in its own statement (events/present-sql.ts): the same rule as shared/plan-limits.ts and
-- guardrails/key-policy.ts (effectiveLimits, effectiveKeyPolicy), kind by kind its own where set,
-- else its plan's; test/integration/events.test.ts holds the two equal. Stored forms in and out.
create function plan_limit_members(own jsonb, plan jsonb) returns jsonb
language sql immutable as $$
  select jsonb_build_object(
      'rate', coalesce(nullif(own -> 'rate', 'null'::jsonb), plan -> 'rate', 'null'::jsonb),
      'monthly_quota', coalesce(nullif(own -> 'monthly_quota', 'null'::jsonb), plan -> 'monthly_quota', 'null'::jsonb))
    || coalesce((
      select jsonb_build_object('meters', jsonb_object_agg(name, jsonb_build_object(
        'rate', coalesce(nullif(own -> 'meters' -> name -> 'rate', 'null'::jsonb),
                         plan -> 'meters' -> name -> 'rate', 'null'::jsonb),
        'monthly_quota', coalesce(nullif(own -> 'meters' -> name -> 'monthly_quota', 'null'::jsonb),
                                  plan -> 'meters' -> name -> 'monthly_quota', 'null'::jsonb))))
      from (select jsonb_object_keys(coalesce(own -> 'meters', '{}'::jsonb))
            union select jsonb_object_keys(coalesce(plan -> 'meters', '{}'::jsonb))) as names (name)
      having count(*) > 0), '{}'::jsonb)
$$;

create function plan_effective_limits(own jsonb, plan jsonb) returns jsonb
language sql immutable as $$
  select case
    when plan is null then own
    when own is null then plan
    else plan_limit_members(own, plan)
      || case when own -> 'shadow' is null and plan -> 'shadow' is null then '{}'::jsonb
         else jsonb_build_object('shadow',
           plan_limit_members(coalesce(own -> 'shadow', '{}'::jsonb), coalesce(plan -> 'shadow', '{}'::jsonb)))
         end
  end
$$;

create function plan_effective_key_policy(own jsonb, plan jsonb) returns jsonb
language sql immutable as $$
  select case
    when plan is null then own
    when own is null then plan
    else jsonb_build_object(
      'allowed_scopes', coalesce(nullif(own -> 'allowed_scopes', 'null'::jsonb), plan -> 'allowed_scopes'),
      'max_ttl_seconds', coalesce(nullif(own -> 'max_ttl_seconds', 'null'::jsonb), plan -> 'max_ttl_seconds'),
      'ip_allowlist', coalesce(nullif(own -> 'ip_allowlist', 'null'::jsonb), plan -> 'ip_allowlist'))
  end
$$;
