-- Webhook deliveries (docs/events.md, Delivery). An event that an active endpoint subscribes to
-- gets one delivery row in the transaction that writes the event, so a delivery exists if and only
-- if its event committed. Workers in every replica claim due rows with FOR UPDATE SKIP LOCKED and
-- a lease: the claim moves `next_attempt_at` past the lease and stamps `lease_token`; a replica
-- that dies mid-attempt leaves the row due again when the lease runs out.
create table webhook_deliveries (
  id               bigint generated always as identity primary key,
  event_id         text not null references events (id) on delete cascade,
  endpoint_id      uuid not null references webhook_endpoints (id),
  -- The number of the next attempt (1 for the first); the last one made when the state is final.
  attempt          int not null default 1 check (attempt >= 1),
  state            text not null default 'pending'
                     check (state in ('pending', 'succeeded', 'failed', 'cancelled')),
  -- When the next attempt is due, or the lease's end while one is under way; null once final.
  next_attempt_at  timestamptz default now(),
  lease_token      uuid,
  created_at       timestamptz not null default now(),
  check ((state = 'pending') = (next_attempt_at is not null)),
  unique (event_id, endpoint_id)
);

-- The workers' claim: pending rows by when they are due.
create index webhook_deliveries_due on webhook_deliveries (next_attempt_at) where state = 'pending';
-- Cancelling an endpoint's pending deliveries when it is disabled or deleted.
create index webhook_deliveries_endpoint on webhook_deliveries (endpoint_id) where state = 'pending';

-- Every attempt made, for GET …/webhook-endpoints/{id}/deliveries (newest first, by seq).
create table webhook_attempts (
  seq              bigint generated always as identity primary key,
  delivery_id      bigint not null references webhook_deliveries (id) on delete cascade,
  endpoint_id      uuid not null references webhook_endpoints (id),
  event_id         text not null,
  attempt          int not null,
  status           int,
  error            text,
  duration_ms      int not null,
  attempted_at     timestamptz not null,
  next_attempt_at  timestamptz
);

create index webhook_attempts_endpoint_seq on webhook_attempts (endpoint_id, seq);
create index webhook_attempts_delivery on webhook_attempts (delivery_id);

-- Since when an endpoint's every attempt has failed (null after a success): five days of it
-- disable the endpoint.
alter table webhook_endpoints add column failing_since timestamptz;
