-- Events (docs/events.md): one row for each change made through the management API or the CLI,
-- written in the transaction of the change. `seq` orders them for paging (newest first) like the
-- other lists; `type` is compared byte by byte ("C") so that a prefix (`api_key.*`) is a range of
-- the type index.
create table events (
  id          text primary key,
  seq         bigint generated always as identity unique,
  -- The parent account the change belongs to: whose audit log shows it.
  account_id  uuid not null references tenants (id),
  type        text collate "C" not null,
  actor       jsonb not null,
  target      jsonb not null,
  request_id  text,
  source_ip   text,
  data        jsonb not null,
  created_at  timestamptz not null default now()
);

-- The audit log: a parent's events newest first, alone or by type, by target, by time.
create index events_account_seq on events (account_id, seq);
create index events_account_type_seq on events (account_id, type, seq);
create index events_account_target_seq on events (account_id, (target ->> 'id'), seq);
create index events_account_created on events (account_id, created_at);
-- Retention deletes the oldest events, whoever's they are.
create index events_created on events (created_at);
