-- Guardrails (docs/api.md, Key policies and IP allow-lists).
-- A parent account's scope ceiling, set by the operator: the scopes (or patterns, `orders:*`) its
-- sub-accounts' keys may be minted with; null: any, as before.
alter table tenants add column allowed_scopes text[];
-- A sub-account's key policy, set by its parent: {"allowed_scopes": [..] | null,
-- "max_ttl_seconds": n | null, "ip_allowlist": ["CIDR", ..] | null}; null when it has none (the
-- gateway never stores an object whose three members are null).
alter table tenants add column key_policy jsonb
  check (key_policy is null or jsonb_typeof(key_policy) = 'object');
-- A key's own IP allow-list (CIDRs); null: any address.
alter table api_keys add column ip_allowlist text[];
