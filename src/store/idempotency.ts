// SQL of the idempotency keys (migrations/010_idempotency_keys.sql; docs/api.md, Idempotency).
// Every time is Postgres's own now(), so that replicas with skewed clocks agree on expiry and on
// when a claim has gone stale.
import type { Sql } from './db.js'

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

/** What a claim found: the key is ours to run, or someone else's row (running, or answered). */
export type ClaimOutcome =
  | { kind: 'claimed' }
  | { kind: 'running'; fingerprint: Buffer }
  | { kind: 'answered'; fingerprint: Buffer; answer: KeptAnswer }

interface Row {
  fingerprint: Uint8Array
  status: number | null
  headers: Record<string, string> | null
  body: Uint8Array | null
}

/**
 * Claims the slot for `claim`: inserts its row, or takes over one that has expired, or one whose
 * request has run longer than `staleAfterSeconds` with the same fingerprint (its replica died
 * mid-way). The insert conflicts on the primary key, so of requests racing on any replica exactly
 * one claims. Otherwise the row that is there is returned; if it vanished meanwhile (its request
 * was answered 400 or 5xx, and released it), the claim is tried again.

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
            expires_at = excluded.expires_at, status = null, headers = null, body = null
        where kept.expires_at <= now()
           or (kept.status is null and kept.fingerprint = excluded.fingerprint
               and kept.claimed_at <= now() - make_interval(secs => ${options.staleAfterSeconds}))
      returning 1`
    if (claimed.length > 0) return { kind: 'claimed' }
    const rows = await sql<Row[]>`
      select fingerprint, status, headers, body from idempotency_keys
      where key_id = ${slot.keyId} and idempotency_key = ${slot.idempotencyKey} and expires_at > now()`
    const row = rows[0]
    if (row === undefined) continue
    const found = Buffer.from(row.fingerprint)
    if (row.status === null || row.body === null) return { kind: 'running', fingerprint: found }
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

/** Lets the slot go (an answer that is not kept): the next request with this key runs anew. */
export async function releaseIdempotencyKey(sql: Sql, slot: IdempotencySlot, claim: string): Promise<void> {
  await sql`
    delete from idempotency_keys
    where key_id = ${slot.keyId} and idempotency_key = ${slot.idempotencyKey} and claim = ${claim}`
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
