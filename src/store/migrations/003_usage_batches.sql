-- Every usage flush carries an id, recorded in the same transaction as its counts. A flush whose
-- commit succeeded but whose reply was lost (a dropped connection) is retried with the same id,
-- and then adds nothing: counts are never doubled. Ids older than a day are pruned by the flush.
create table usage_batches (
  id         uuid primary key,
  flushed_at timestamptz not null default now()
);
create index usage_batches_flushed_at on usage_batches (flushed_at);
