-- Key expiry and roll (docs/api.md, API keys of a sub-account). A key past expires_at is refused
-- as expired without any message to the replicas: its cached record carries the instant. A key
-- made by a roll names the key it replaces. Both columns are null by default: no table rewrite.
alter table api_keys
  add column expires_at  timestamptz,
  add column rolled_from uuid references api_keys (id);
