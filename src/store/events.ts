// Events of the audit log (docs/events.md). SQL only; callers pass `sql` or a transaction.
import type { Sql, Tx } from './db.js'

type Db = Sql | Tx

/** postgres.js's JSON parameter type, which plain object types do not satisfy. */
const json = (db: Db, value: unknown) => db.json(value as Parameters<Sql['json']>[0])

export interface EventRow {
  id: string
  type: string
  created_at: Date
  account_id: string
  actor: { type: 'api_key' | 'operator'; key_id: string | null }
  target: { type: string; id: string }
  request_id: string | null
  source_ip: string | null
  data: { object: Record<string, unknown>; previous: Record<string, unknown> | null }
}

export type EventPageRow = EventRow & { seq: string }

const COLUMNS = 'id, type, created_at, account_id, actor, target, request_id, source_ip, data'

/** Where the webhook workers hear that deliveries were queued: NOTIFY is sent when the transaction commits. */
export const DELIVERIES_CHANNEL = 'tgw_webhook_deliveries'

/**
 * Writes the event and, in the same statement, one delivery for each active endpoint of the
 * account that subscribes to its type or to its resource's every type (`api_key.*`); with any
 * queued, a NOTIFY that Postgres sends only if the transaction commits.
 */
export async function insertEvent(db: Db, event: Omit<EventRow, 'created_at'>): Promise<void> {
  const resourceWide = `${event.type.slice(0, event.type.indexOf('.'))}.*`
  await db`
    with event as (
      insert into events (id, account_id, type, actor, target, request_id, source_ip, data)
      values (${event.id}, ${event.account_id}, ${event.type}, ${json(db, event.actor)}, ${json(db, event.target)},
              ${event.request_id}, ${event.source_ip}, ${json(db, event.data)})
      returning id, account_id
    ), queued as (
      insert into webhook_deliveries (event_id, endpoint_id)
      select event.id, endpoint.id from event
      join webhook_endpoints endpoint on endpoint.account_id = event.account_id
        and endpoint.status = 'active'
        and endpoint.event_types && array[${event.type}, ${resourceWide}]::text[]
      returning 1
    )
    select pg_notify(${DELIVERIES_CHANNEL}, '') where exists (select 1 from queued)`
}

export interface EventFilter {
  limit: number
  /** Return rows strictly before this position (from a cursor): newest first. */
  beforeSeq: string | null
  /** One type, or every type of a prefix that ends in `.` (`api_key.`). */
  type: { exact: string } | { prefix: string } | null
  targetId: string | null
  /** created_at ≥ since. */
  since: Date | null
  /** created_at < until. */
  until: Date | null
}

/** The character after `.` in byte order: `prefix` ≤ type < this bound is every type that starts so. */
const afterPrefix = (prefix: string) => `${prefix.slice(0, -1)}/`

/** One page of a parent's events, newest first, by keyset on `seq`. */
export function listEvents(db: Db, accountId: string, filter: EventFilter): Promise<EventPageRow[]> {
  const { type } = filter
  return db<EventPageRow[]>`
    select ${db.unsafe(COLUMNS)}, seq::text as seq from events
    where account_id = ${accountId}
      ${filter.beforeSeq === null ? db`` : db`and seq < ${filter.beforeSeq}`}
      ${type === null ? db`` : 'exact' in type ? db`and type = ${type.exact}` : db`and type >= ${type.prefix} and type < ${afterPrefix(type.prefix)}`}
      ${filter.targetId === null ? db`` : db`and target ->> 'id' = ${filter.targetId}`}
      ${filter.since === null ? db`` : db`and created_at >= ${filter.since}`}
      ${filter.until === null ? db`` : db`and created_at < ${filter.until}`}
    order by seq desc
    limit ${filter.limit}`
}

/**
 * Deletes at most `batch` events older than `before` and returns how many it deleted. SKIP LOCKED:
 * replicas sweeping at once take different rows instead of waiting on each other.
 */
export async function deleteEventsBefore(db: Db, before: Date, batch: number): Promise<number> {
  const result = await db`
    delete from events where id in (
      select id from events where created_at < ${before}
      order by created_at
      limit ${batch}
      for update skip locked
    )`
  return result.count
}
