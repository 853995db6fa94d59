-- What a change made under an Idempotency-Key left, whatever became of its answer
-- (docs/decisions/0153-a-change-marks-its-claim-in-its-own-transaction.md). The change's own
-- transaction marks the row of its claim, so the row says whether the change committed even when
-- the request answered 5xx or its replica died.
alter table idempotency_keys
  -- The changed resource ({"type", "id"}, its event's target), set in the change's transaction.
  add column committed_target jsonb,
  -- Its request answered a 5xx after the change committed: no answer will ever be kept.
  add column answer_lost boolean not null default false;
