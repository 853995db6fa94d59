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
