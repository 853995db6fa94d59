// SQL of the idempotency keys (migrations/010_idempotency_keys.sql; docs/api.md, Idempotency).
// Every time is Postgres's own now(), so that replicas with skewed clocks agree on expiry and on
// when a claim has gone stale.
import type { Sql, Tx } from './db.js'

/** Who holds an idempotency key: the calling key's id and the header's value. */
export interface IdempotencySlot {
  keyId: string
  idempotencyKey: string
}

/** A kept answer, as stored: the body still sealed. */
export interface KeptAnswer {
  status: number
  headers: Record<string, string>
  sealedBody: Buffer
}

/** The resource a change changed (its event's target), as its transaction marked it on the row. */
export interface CommittedTarget {
  type: string
  id: string
}

/**
 * What a claim found: the key is ours to run, or someone else's row: running, answered, or
 * lost (its change committed, but its request answered a 5xx or died before keeping the answer).
 */
export type ClaimOutcome =
  | { kind: 'claimed' }
  | { kind: 'running'; fingerprint: Buffer }
  | { kind: 'answered'; fingerprint: Buffer; answer: KeptAnswer }
  | { kind: 'lost'; fingerprint: Buffer; target: CommittedTarget }

interface Row {
  fingerprint: Uint8Array
  status: number | null
  headers: Record<string, string> | null
  body: Uint8Array | null
  committed_target: CommittedTarget | null
  /** Its request let it go after its change committed, or its claim went stale. */
  lost: boolean
}

/**
 * Claims the slot for `claim`: inserts its row, or takes over one that has expired, or one whose
 * request has run longer than `staleAfterSeconds` with the same fingerprint and no committed
 * change (its replica died mid-way). The insert conflicts on the primary key, so of requests
 * racing on any replica exactly one claims. Otherwise the row that is there is returned; if it
 * vanished meanwhile (its request was answered 400 or 5xx, and released it), the claim is tried again.
 */
export async function claimIdempotencyKey(
  sql: Sql,
  slot: IdempotencySlot,
  fingerprint: Buffer,
  claim: string,
  options: { keepSeconds: number; staleAfterSeconds: number },
): Promise<ClaimOutcome> {
  // A row that vanishes between the two queries twice in a row is being claimed and released
  // fast: answered as in flight, since another request holds it at that moment.
  for (let attempt = 0; attempt < 3; attempt++) {
    const claimed = await sql`
      insert into idempotency_keys as kept (key_id, idempotency_key, fingerprint, claim, claimed_at, expires_at)
      values (${slot.keyId}, ${slot.idempotencyKey}, ${fingerprint}, ${claim}, now(),
              now() + make_interval(secs => ${options.keepSeconds}))
      on conflict (key_id, idempotency_key) do update
        set fingerprint = excluded.fingerprint, claim = excluded.claim, claimed_at = excluded.claimed_at,
            expires_at = excluded.expires_at, status = null, headers = null, body = null,
            committed_target = null, answer_lost = false
        where kept.expires_at <= now()
           or (kept.status is null and kept.committed_target is null and kept.fingerprint = excluded.fingerprint
               and kept.claimed_at <= now() - make_interval(secs => ${options.staleAfterSeconds}))
      returning 1`
    if (claimed.length > 0) return { kind: 'claimed' }
    const rows = await sql<Row[]>`
      select fingerprint, status, headers, body, committed_target,
             answer_lost or claimed_at <= now() - make_interval(secs => ${options.staleAfterSeconds}) as lost
      from idempotency_keys
      where key_id = ${slot.keyId} and idempotency_key = ${slot.idempotencyKey} and expires_at > now()`
    const row = rows[0]
    if (row === undefined) continue
    const found = Buffer.from(row.fingerprint)
    if (row.status === null || row.body === null) {
      if (row.committed_target !== null && row.lost) {
        return { kind: 'lost', fingerprint: found, target: row.committed_target }
      }
      return { kind: 'running', fingerprint: found }
    }
    return {
      kind: 'answered',
      fingerprint: found,
      answer: { status: row.status, headers: row.headers ?? {}, sealedBody: Buffer.from(row.body) },
    }
  }
  return { kind: 'running', fingerprint }
}

/** Keeps the answer of the request that holds `claim`, for `keepSeconds` from now. */
export async function keepIdempotentAnswer(
  sql: Sql,
  slot: IdempotencySlot,
  claim: string,
  answer: KeptAnswer,
  keepSeconds: number,
): Promise<void> {
  await sql`
    update idempotency_keys
    set status = ${answer.status}, headers = ${sql.json(answer.headers)}, body = ${answer.sealedBody},
        expires_at = now() + make_interval(secs => ${keepSeconds})
    where key_id = ${slot.keyId} and idempotency_key = ${slot.idempotencyKey} and claim = ${claim}`
}

/**
 * Marks, inside the change's transaction, that the change holding `claim` commits with it; false
 * when the claim is gone (let go after a 5xx, or taken over): the caller must then roll back.
 * The row stays locked until the transaction ends, so a release waits to see how it ended.
 */
export async function markIdempotentChange(
  tx: Tx,
  slot: IdempotencySlot,
  claim: string,
  target: CommittedTarget,
): Promise<boolean> {
  const marked = await tx`
    update idempotency_keys set committed_target = ${tx.json({ type: target.type, id: target.id })}
    where key_id = ${slot.keyId} and idempotency_key = ${slot.idempotencyKey} and claim = ${claim}
    returning 1`
  return marked.length > 0
}

/**
 * Lets the slot go (an answer that is not kept), unless the request's change committed: then the
 * row stays, marked lost, and a retry is told so instead of making the change again. The delete
 * waits for a transaction that marked the row, and sees whether it committed.
 */
export async function releaseIdempotencyKey(sql: Sql, slot: IdempotencySlot, claim: string): Promise<void> {
  const released = await sql`
    delete from idempotency_keys
    where key_id = ${slot.keyId} and idempotency_key = ${slot.idempotencyKey} and claim = ${claim}
      and committed_target is null`
  if (released.count > 0) return
  await sql`
    update idempotency_keys set answer_lost = true
    where key_id = ${slot.keyId} and idempotency_key = ${slot.idempotencyKey} and claim = ${claim}
      and committed_target is not null and status is null`
}

/** Deletes up to `batch` expired rows; returns how many it deleted. */
export async function deleteExpiredIdempotencyKeys(sql: Sql, batch: number): Promise<number> {
  const deleted = await sql`
    delete from idempotency_keys
    where (key_id, idempotency_key) in (
      select key_id, idempotency_key from idempotency_keys
      where expires_at <= now() order by expires_at limit ${batch}
      for update skip locked)`
  return deleted.count
}
