-- Webhook endpoints of a parent account (docs/api.md, Webhook endpoints). The secret signs the
-- deliveries, so it is kept sealed with AES-256-GCM under ENCRYPTION_KEY (encryption/seal.ts),
-- never in the clear; a deleted endpoint keeps its row (events and, later, deliveries name it) but
-- loses its secret. `disabled_at` and `disabled_reason` are set by the delivery worker (a 410, or
-- days of failures); `seq` orders the list for paging like the other lists.
create table webhook_endpoints (
  id               uuid primary key,
  seq              bigint generated always as identity unique,
  account_id       uuid not null references tenants (id),
  url              text not null,
  -- Catalogue types (`api_key.revoked`) or a resource's every type (`api_key.*`).
  event_types      text[] not null check (cardinality(event_types) > 0),
  description      text,
  secret_sealed    bytea,
  status           text not null default 'active' check (status in ('active', 'disabled', 'deleted')),
  created_at       timestamptz not null default now(),
  disabled_at      timestamptz,
  disabled_reason  text,
  deleted_at       timestamptz,
  check ((status = 'deleted') = (deleted_at is not null)),
  check ((status = 'deleted') = (secret_sealed is null))
);

-- The list: a parent's endpoints that are not deleted, oldest first.
create index webhook_endpoints_account_seq on webhook_endpoints (account_id, seq) where status <> 'deleted';
-- The delivery worker looks up the active endpoints of an account.
create index webhook_endpoints_active on webhook_endpoints (account_id) where status = 'active';
