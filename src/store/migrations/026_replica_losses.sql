-- Replicas that stopped flushing without saying goodbye (killed, or cut off for good): the close
-- moves a flush mark here once it is no longer waited for. Whatever such a replica counted after
-- `flushed_through` never reached Postgres, nor did its request log's last records: reconciliation
-- explains a difference between the meter and the log in the periods after it as `replica_lost`
-- (docs/billing.md, Reconciliation).
create table usage_replica_losses (
  replica_id      uuid not null,
  flushed_through timestamptz not null,
  last_seen_at    timestamptz not null,
  found_at        timestamptz not null default now(),
  primary key (replica_id, flushed_through)
);
create index usage_replica_losses_through on usage_replica_losses (flushed_through);
