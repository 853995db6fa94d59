-- Idempotency keys of the management API (docs/api.md, Idempotency). One row per (calling key,
-- Idempotency-Key): claimed by the first request with an insert that conflicts on the primary
-- key, so that replicas agree on who runs it; then its answer, kept until expires_at.
create table idempotency_keys (
  key_id          uuid not null references api_keys (id) on delete cascade,
  idempotency_key text not null,
  -- SHA-256 of the method, the path and the body (management/idempotency-request.ts).
  fingerprint     bytea not null,
  -- The claim of the request that runs it (or ran it): only that request records its answer.
  claim           uuid not null,
  claimed_at      timestamptz not null default now(),
  -- 24 h after the answer; while the request runs, 24 h after its claim.
  expires_at      timestamptz not null,
  -- The answer, once there is one: null while the request runs.
  status          smallint,
  -- Location, Content-Type and Cache-Control as they were sent.
  headers         jsonb,
  -- The body, sealed with AES-256-GCM under ENCRYPTION_KEY (encryption/seal.ts).
  body            bytea,
  primary key (key_id, idempotency_key),
  check ((status is null) = (body is null))
);
-- The sweep deletes expired rows in batches, oldest first.
create index idempotency_keys_expires_at on idempotency_keys (expires_at);
