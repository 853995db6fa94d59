// Webhook deliveries and their attempts (docs/events.md, Delivery). SQL only. Deliveries are
// queued by insertEvent (store/events.ts) in the transaction of their event; the workers claim,
// record and cancel them here. Every time is the worker's clock, passed in, so that tests can move it.
import type { Sql, Tx } from './db.js'
import { DELIVERIES_CHANNEL, type EventRow } from './events.js'

type Db = Sql | Tx

/** A claimed delivery with what its attempt needs: the event, the endpoint's URL and sealed secret. */
export interface ClaimedDelivery {
  id: string
  attempt: number
  leaseToken: string
  endpointId: string
  endpointActive: boolean
  url: string
  secretSealed: Buffer | null
  event: EventRow
}

interface ClaimRow extends EventRow {
  delivery_id: string
  attempt: number
  endpoint_id: string
  endpoint_status: string
  url: string
  secret_sealed: Buffer | null
}

/**
 * Claims up to `limit` due deliveries for this worker: their rows are locked FOR UPDATE SKIP LOCKED
 * (another worker's claim in progress skips them) and moved past `leaseUntil` under a new token.
 * No endpoint gets more than `perEndpoint` attempts under way, nor a parent more than `perParent`
 * over all its endpoints, counting every worker's live leases: slow or hanging receivers with a
 * backlog cannot take every worker's slots from the others.
 */
export async function claimDueDeliveries(
  sql: Sql,
  options: { now: Date; leaseUntil: Date; leaseToken: string; limit: number; perEndpoint: number; perParent: number },
): Promise<ClaimedDelivery[]> {
  const { now, perEndpoint, perParent } = options
  const rows = await sql<ClaimRow[]>`
    with leased as (
      select d.endpoint_id, e.account_id, count(*)::int as n
      from webhook_deliveries d join webhook_endpoints e on e.id = d.endpoint_id
      where d.lease_token is not null and d.state = 'pending' and d.next_attempt_at > ${now}
      group by d.endpoint_id, e.account_id
    ), parent_leased as (
      select account_id, sum(n)::int as n from leased group by account_id
    ), due as (
      select d.id, d.endpoint_id, e.account_id, d.next_attempt_at
      from webhook_deliveries d join webhook_endpoints e on e.id = d.endpoint_id
      where d.state = 'pending' and d.next_attempt_at <= ${now}
        and d.endpoint_id not in (select endpoint_id from leased where n >= ${perEndpoint})
        and e.account_id not in (select account_id from parent_leased where n >= ${perParent})
      order by d.next_attempt_at
      limit ${options.limit}
      for update of d skip locked
    ), picked as (
      select ranked.id from (
        select id, endpoint_id, account_id,
          row_number() over (partition by endpoint_id order by next_attempt_at, id) as endpoint_rank,
          row_number() over (partition by account_id order by next_attempt_at, id) as parent_rank
        from due
      ) ranked
      left join leased on leased.endpoint_id = ranked.endpoint_id
      left join parent_leased on parent_leased.account_id = ranked.account_id
      where ranked.endpoint_rank + coalesce(leased.n, 0) <= ${perEndpoint}
        and ranked.parent_rank + coalesce(parent_leased.n, 0) <= ${perParent}
    )
    update webhook_deliveries delivery
    set next_attempt_at = ${options.leaseUntil}, lease_token = ${options.leaseToken}
    from picked, events event, webhook_endpoints endpoint
    where delivery.id = picked.id and event.id = delivery.event_id and endpoint.id = delivery.endpoint_id
    returning delivery.id::text as delivery_id, delivery.attempt, delivery.endpoint_id,
      endpoint.status as endpoint_status, endpoint.url, endpoint.secret_sealed,
      event.id, event.type, event.created_at, event.account_id, event.actor, event.target,
      event.request_id, event.source_ip, event.data`
  return rows.map((row) => ({
    id: row.delivery_id,
    attempt: row.attempt,
    leaseToken: options.leaseToken,
    endpointId: row.endpoint_id,
    endpointActive: row.endpoint_status === 'active',
    url: row.url,
    secretSealed: row.secret_sealed,
    event: {
      id: row.id,
      type: row.type,
      created_at: row.created_at,
      account_id: row.account_id,
      actor: row.actor,
      target: row.target,
      request_id: row.request_id,
      source_ip: row.source_ip,
      data: row.data,
    },
  }))
}

export interface AttemptRecord {
  delivery: ClaimedDelivery
  status: number | null
  error: string | null
  durationMs: number
  attemptedAt: Date
  /** When the next attempt is due; null when none will be made (success, given up, endpoint disabled). */
  nextAttemptAt: Date | null
}

export async function insertAttempt(tx: Tx, record: AttemptRecord): Promise<void> {
  const { delivery } = record
  await tx`
    insert into webhook_attempts
      (delivery_id, endpoint_id, event_id, attempt, status, error, duration_ms, attempted_at, next_attempt_at)
    values (${delivery.id}, ${delivery.endpointId}, ${delivery.event.id}, ${delivery.attempt}, ${record.status},
            ${record.error}, ${record.durationMs}, ${record.attemptedAt}, ${record.nextAttemptAt})`
}

/**
 * Moves a delivery on after an attempt, if this worker still holds its lease: to the next attempt
 * at `next`, or to a final state. False when the lease was lost (another worker has the row now).
 */
export async function settleDelivery(
  tx: Tx,
  delivery: ClaimedDelivery,
  outcome: { next: Date } | { state: 'succeeded' | 'failed' | 'cancelled' },
): Promise<boolean> {
  const result =
    'next' in outcome
      ? await tx`
          update webhook_deliveries set attempt = attempt + 1, next_attempt_at = ${outcome.next}, lease_token = null
          where id = ${delivery.id} and lease_token = ${delivery.leaseToken}`
      : await tx`
          update webhook_deliveries set state = ${outcome.state}, next_attempt_at = null, lease_token = null
          where id = ${delivery.id} and lease_token = ${delivery.leaseToken}`
  return result.count === 1
}

/** A success ends the endpoint's run of failures. */
export async function clearFailingSince(tx: Tx, endpointId: string): Promise<void> {
  await tx`update webhook_endpoints set failing_since = null where id = ${endpointId} and failing_since is not null`
}

/** Starts the endpoint's run of failures at `at` unless one is running; returns when it started. */
export async function markFailing(tx: Tx, endpointId: string, at: Date): Promise<Date> {
  const [row] = await tx<{ failing_since: Date }[]>`
    update webhook_endpoints set failing_since = coalesce(failing_since, ${at})
    where id = ${endpointId} returning failing_since`
  return row?.failing_since ?? at
}

/** Disables an active endpoint and cancels its pending deliveries. False when it was not active. */
export async function disableEndpoint(tx: Tx, endpointId: string, at: Date, reason: string): Promise<boolean> {
  const result = await tx`
    update webhook_endpoints set status = 'disabled', disabled_at = ${at}, disabled_reason = ${reason}
    where id = ${endpointId} and status = 'active'`
  if (result.count === 0) return false
  await cancelPendingDeliveries(tx, endpointId)
  return true
}

/** No more attempts for the endpoint's pending deliveries (it was disabled or deleted). */
export async function cancelPendingDeliveries(db: Db, endpointId: string): Promise<void> {
  await db`
    update webhook_deliveries set state = 'cancelled', next_attempt_at = null, lease_token = null
    where endpoint_id = ${endpointId} and state = 'pending'`
}

/**
 * Hands back deliveries this worker claimed but will not attempt (it is stopping): due at once
 * for another worker, under no lease.
 */
export async function releaseDeliveries(sql: Sql, ids: string[], leaseToken: string, now: Date): Promise<void> {
  if (ids.length === 0) return
  await sql`
    update webhook_deliveries set next_attempt_at = ${now}, lease_token = null
    where id in (select jsonb_array_elements_text(${sql.json(ids)})::bigint) and lease_token = ${leaseToken} and state = 'pending'`
}

/** Seconds since the oldest due delivery became due (0 when none is waiting). */
export async function oldestDueAgeSeconds(sql: Sql, now: Date): Promise<number> {
  const [row] = await sql<{ age: number | null }[]>`
    select extract(epoch from (${now}::timestamptz - min(next_attempt_at)))::float8 as age
    from webhook_deliveries where state = 'pending' and next_attempt_at <= ${now}`
  return Math.max(0, row?.age ?? 0)
}

export interface AttemptPageRow {
  seq: string
  event_id: string
  event_type: string
  attempt: number
  status: number | null
  error: string | null
  duration_ms: number
  attempted_at: Date
  next_attempt_at: Date | null
}

/** One page of an endpoint's attempts, newest first, by keyset on `seq` (the column, not its text). */
export function listAttempts(
  db: Db,
  endpointId: string,
  page: { limit: number; beforeSeq: string | null },
): Promise<AttemptPageRow[]> {
  return db<AttemptPageRow[]>`
    select a.seq::text as seq, a.event_id, e.type as event_type, a.attempt, a.status, a.error, a.duration_ms,
      a.attempted_at, a.next_attempt_at
    from webhook_attempts a join events e on e.id = a.event_id
    where a.endpoint_id = ${endpointId} ${page.beforeSeq === null ? db`` : db`and a.seq < ${page.beforeSeq}`}
    order by a.seq desc
    limit ${page.limit}`
}

/**
 * A resend (POST …/deliveries/{event_id}/retry): the endpoint's delivery of that event due at `now`,
 * under no lease. A final one (succeeded, failed, cancelled) is pending again, for one more attempt
 * than it had (and the retries left of the schedule, if any); a pending one is brought forward,
 * unless an attempt is under way (a lease): then nothing changes. Null when there is no such
 * delivery; else the attempt's number, when it is due, and whether this call made it so.
 */
export async function resendDelivery(
  tx: Tx,
  endpointId: string,
  eventId: string,
  now: Date,
): Promise<{ attempt: number; nextAttemptAt: Date; queued: boolean } | null> {
  const [updated] = await tx<{ attempt: number; next_attempt_at: Date }[]>`
    update webhook_deliveries
    set attempt = case when state = 'pending' then attempt else attempt + 1 end,
      state = 'pending', next_attempt_at = ${now}, lease_token = null
    where endpoint_id = ${endpointId} and event_id = ${eventId} and (state <> 'pending' or lease_token is null)
    returning attempt, next_attempt_at, pg_notify(${DELIVERIES_CHANNEL}, '')`
  if (updated !== undefined) return { attempt: updated.attempt, nextAttemptAt: updated.next_attempt_at, queued: true }
  const [leased] = await tx<{ attempt: number; next_attempt_at: Date }[]>`
    select attempt, next_attempt_at from webhook_deliveries where endpoint_id = ${endpointId} and event_id = ${eventId}`
  return leased === undefined ? null : { attempt: leased.attempt, nextAttemptAt: leased.next_attempt_at, queued: false }
}
