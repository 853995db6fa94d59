-- Prepaid credits (docs/api.md, Credits): a sub-account's balance of a route meter is made of
-- grants, each of `units` with what is left of them. Use burns them in the order of the index
-- below (priority, then soonest expiry, then oldest); a voided grant's rest is gone at once, an
-- expired one's at its expiry.
create table credit_grants (
  id              uuid primary key,
  sub_account_id  uuid not null references tenants (id),
  -- The sub-account's parent, denormalised: every lookup is scoped by it.
  account_id      uuid not null references tenants (id),
  meter           text not null check (meter ~ '^[a-z][a-z0-9_]{0,31}$' and meter <> 'requests'),
  units           bigint not null check (units between 1 and 1000000000000),
  units_left      bigint not null check (units_left between 0 and units),
  priority        integer not null default 100 check (priority between 0 and 1000),
  expires_at      timestamptz,
  voided_at       timestamptz,
  created_at      timestamptz not null default now(),
  metadata        jsonb not null default '{}'::jsonb,
  -- What the grant paid, when it was made, of the debt its sub-account had in that meter.
  debt_paid       bigint not null default 0,
  -- Grants are listed and burned in one order: the creation's sequence breaks a tie of instants.
  seq             bigint generated always as identity
);

-- The burn order of a sub-account's meter, live grants only.
create index credit_grants_burn_order on credit_grants
  (sub_account_id, meter, priority, expires_at nulls last, created_at, seq) where voided_at is null;

-- Units used beyond every live grant (answers in flight when the balance ran out, docs/api.md,
-- Credits): owed by the next grant, which starts with that much burned.
create table credit_debts (
  sub_account_id  uuid not null references tenants (id),
  meter           text not null,
  units           bigint not null check (units >= 0),
  primary key (sub_account_id, meter)
);

-- The units burned from each grant by the use of each usage period: the usage export's
-- `data.credits` and the reconciliation of grants (docs/billing.md).
create table credit_burns (
  grant_id      uuid not null references credit_grants (id),
  period_start  timestamptz not null,
  units         bigint not null check (units >= 0),
  primary key (grant_id, period_start)
);

-- The sweep of expired grants (credits.expired) reads the grants that expired lately, by index.
create index credit_grants_expiry on credit_grants (expires_at) where voided_at is null and expires_at is not null;
