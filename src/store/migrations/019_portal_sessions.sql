-- The sub-account portal (docs/api.md, Portal sessions). A session is made by a parent for one of
-- its sub-accounts, with a subset of the portal's permissions; its link carries a one-time token,
-- which the page exchanges once for the session's own credential (a cookie, or a bearer when
-- embedded). Only SHA-256 digests of both are kept, as for API keys. `token_used_at` is set by the
-- exchange, in the statement that checks it is still null: a token is taken at most once.
create table portal_sessions (
  id              uuid primary key,
  sub_account_id  uuid not null references tenants (id),
  -- The sub-account's parent, denormalised: every lookup and list is scoped by it.
  account_id      uuid not null references tenants (id),
  permissions     text[] not null check (
    cardinality(permissions) > 0
    and permissions <@ array['keys:read', 'keys:write', 'usage:read', 'requests:read']
  ),
  return_url      text,
  token_digest    bytea not null unique,
  token_used_at   timestamptz,
  -- The session's credential, set when the token is exchanged.
  secret_digest   bytea unique,
  created_at      timestamptz not null default now(),
  expires_at      timestamptz not null,
  ended_at        timestamptz,
  -- `deleted` (DELETE by the parent) or `deactivated` (the sub-account was); null while open.
  ended_reason    text check (ended_reason in ('deleted', 'deactivated')),
  check ((ended_at is null) = (ended_reason is null)),
  check ((secret_digest is null) = (token_used_at is null))
);

-- The parent's console lists a sub-account's open sessions.
create index portal_sessions_sub_account on portal_sessions (sub_account_id, created_at) where ended_at is null;

-- A deactivated sub-account's sessions end in the transaction that deactivates it, whichever
-- path does (the API, a future CLI command): a reactivation never brings them back. Every session
-- lookup also reads the sub-account's status, so none is honoured while it is deactivated.
create function end_portal_sessions_of_deactivated() returns trigger language plpgsql as $$
begin
  update portal_sessions set ended_at = now(), ended_reason = 'deactivated'
  where sub_account_id = new.id and ended_at is null;
  return null;
end
$$;
create trigger tenants_end_portal_sessions after update of status on tenants
  for each row when (new.status = 'deactivated' and old.status is distinct from 'deactivated')
  execute function end_portal_sessions_of_deactivated();

-- The https origins allowed to embed a parent's portal (the `frame-ancestors` of its pages), set
-- by the operator (`cli -- accounts portal-origins`); null: none, `frame-ancestors 'none'`.
alter table tenants add column portal_origins text[];
