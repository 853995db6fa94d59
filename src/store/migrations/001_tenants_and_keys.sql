-- Tenants are parent accounts (parent_id is null) and their sub-accounts (one level deep).
create table tenants (
  id             uuid primary key default gen_random_uuid(),
  -- Insertion order, for keyset paging ("oldest first") that never skips or repeats a row.
  seq            bigint generated always as identity unique,
  parent_id      uuid references tenants (id),
  name           text not null,
  external_id    text,
  status         text not null default 'active' check (status in ('active', 'deactivated')),
  metadata       jsonb not null default '{}'::jsonb,
  created_at     timestamptz not null default now(),
  updated_at     timestamptz not null default now(),
  deactivated_at timestamptz,
  check ((status = 'deactivated') = (deactivated_at is not null))
);

-- external_id is unique among one parent's sub-accounts (docs/api.md) and among parent accounts.
create unique index tenants_sub_external_id on tenants (parent_id, external_id)
  where parent_id is not null and external_id is not null;
create unique index tenants_parent_external_id on tenants (external_id)
  where parent_id is null and external_id is not null;
-- List pages: one parent's sub-accounts in insertion order, optionally by status.
create index tenants_parent_seq on tenants (parent_id, seq) where parent_id is not null;
create index tenants_parent_status_seq on tenants (parent_id, status, seq) where parent_id is not null;

create table api_keys (
  id            uuid primary key default gen_random_uuid(),
  seq           bigint generated always as identity unique,
  tenant_id     uuid not null references tenants (id),
  name          text not null,
  scopes        text[] not null,
  -- The first characters of the key, kept in clear so that people can tell keys apart.
  prefix        text not null,
  -- SHA-256 of the key and of the client secret; the values themselves are never stored.
  key_digest    bytea not null unique,
  secret_digest bytea,
  status        text not null default 'active' check (status in ('active', 'revoked')),
  created_at    timestamptz not null default now(),
  revoked_at    timestamptz,
  last_used_at  timestamptz,
  check ((status = 'revoked') = (revoked_at is not null))
);

create index api_keys_tenant_seq on api_keys (tenant_id, seq);
