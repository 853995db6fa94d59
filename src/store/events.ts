// Events of the audit log (docs/events.md). SQL only; callers pass `sql` or a transaction.
import type { Sql, Tx } from './db.js'
import { Statement } from './statement.js'

type Db = Sql | Tx

export interface EventRow {
  id: string
  type: string
  created_at: Date
  account_id: string
  actor: { type: 'api_key' | 'operator' | 'gateway' | 'portal_session'; key_id: string | null; id?: string }
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
 * One delivery for each active endpoint of the event's account that subscribes to its type or to
 * its resource's every type (`api_key.*`), as a CTE over `event`. Each queued row NOTIFYs, which
 * Postgres sends once (one channel, one payload), and only if the transaction commits.
 */
export function queuedDeliveries(statement: Statement, type: string): string {
  const resourceWide = `${type.slice(0, type.indexOf('.'))}.*`
  return `queued as (
      insert into webhook_deliveries (event_id, endpoint_id)
      select event.id, endpoint.id from event
      join webhook_endpoints endpoint on endpoint.account_id = event.account_id
        and endpoint.status = 'active'
        and endpoint.event_types && array[${statement.param(type)}, ${statement.param(resourceWide)}]::text[]
      returning pg_notify('${DELIVERIES_CHANNEL}', '')
    )`
}

/** A test send's one delivery: to that endpoint if it is active, whatever it subscribes to. */
function queuedTo(statement: Statement, endpointId: string): string {
  return `queued as (
      insert into webhook_deliveries (event_id, endpoint_id)
      select event.id, endpoint.id from event
      join webhook_endpoints endpoint on endpoint.account_id = event.account_id
        and endpoint.id = ${statement.param(endpointId)} and endpoint.status = 'active'
      returning pg_notify('${DELIVERIES_CHANNEL}', '')
    )`
}

/**
 * Writes the event, with its deliveries queued in the same statement (in the change's transaction):
 * to every endpoint that subscribes to it, or (`deliverOnlyTo`, a test send) to that one only.
 */
export async function insertEvent(
  db: Db,
  event: Omit<EventRow, 'created_at'>,
  deliverOnlyTo: string | null = null,
): Promise<void> {
  const s = new Statement()
  await s.run(
    db,
    `with event as (
      insert into events (id, account_id, type, actor, target, request_id, source_ip, data)
      values (${s.param(event.id)}, ${s.param(event.account_id)}, ${s.param(event.type)}, ${s.json(db, event.actor)},
              ${s.json(db, event.target)}, ${s.param(event.request_id)}, ${s.param(event.source_ip)}, ${s.json(db, event.data)})
      returning id, account_id
    ), ${deliverOnlyTo === null ? queuedDeliveries(s, event.type) : queuedTo(s, deliverOnlyTo)}
    select 1`,
  )
}

/**
 * An event written by its change's own statement: its target's id, object and previous fields are
 * SQL over the rows of the change's CTEs (`source`), so that no event is written when they have
 * none, that is when nothing changed.
 */
export interface EventOfStatement extends Omit<EventRow, 'created_at' | 'target' | 'data'> {
  target: { type: string; id: string }
  object: string
  previous: string
  /** The FROM list the event is selected from: the CTE of the changed rows, and any other it reads. */
  source: string
}

/**
 * The result of a change that may change nothing (its CTEs `before`, the row locked, and
 * `changed`): the changed row if there is one, else the row as it was; each with `changed`, and
 * `extra` columns. No row: there was nothing to change.
 */
export const changedOrBefore = (extra = '') => `
  select changed.*, true as changed ${extra} from changed, before
  union all
  select before.*, false as changed ${extra} from before where not exists (select 1 from changed)`

/**
 * `with <changes>, event, queued <result>`: a change and its event (and their deliveries) in one
 * statement, atomic without a transaction of several round trips
 * (docs/decisions/0155-a-one-statement-change-builds-its-events-object.md).
 * `changes` and `result` hold placeholders of `statement`.
 */
export function changeWithEvent<T extends readonly object[]>(
  db: Db,
  statement: Statement,
  changes: string,
  event: EventOfStatement,
  result: string,
): Promise<T> {
  const s = statement
  return s.run<T>(
    db,
    `with ${changes},
    event as (
      insert into events (id, account_id, type, actor, target, request_id, source_ip, data)
      select ${s.param(event.id)}, ${s.param(event.account_id)}, ${s.param(event.type)}, ${s.json(db, event.actor)},
             jsonb_build_object('type', ${s.param(event.target.type)}::text, 'id', ${event.target.id}),
             ${s.param(event.request_id)}, ${s.param(event.source_ip)},
             jsonb_build_object('object', ${event.object}, 'previous', ${event.previous})
      from ${event.source}
      returning id, account_id
    ), ${queuedDeliveries(s, event.type)}
    ${result}`,
  )
}

export interface EventFilter {
  limit: number
  /** Return rows strictly before this position (from a cursor): newest first. */
  beforeSeq: string | null
  /** One type, or every type of a prefix that ends in `.` (`api_key.`). */
  type: { exact: string } | { prefix: string } | null
  targetId: string | null
  /** Events whose target is this sub-account, one of its keys or one of its portal sessions. */
  subAccountId?: string | null
  /** created_at ≥ since. */
  since: Date | null
  /** created_at < until. */
  until: Date | null
}

/** The character after `.` in byte order: `prefix` ≤ type < this bound is every type that starts so. */
const afterPrefix = (prefix: string) => `${prefix.slice(0, -1)}/`

/**
 * The ids a sub-account's events target: its own, its keys' (rolled and revoked ones too) and its
 * portal sessions'. As an array of text, so that the (account_id, target id, seq) index finds each.
 */
function subAccountTargets(s: Statement, subAccountId: string): string {
  const id = s.param(subAccountId)
  return `array(
      select ${id}::text
      union all select id::text from api_keys where tenant_id = ${id}::uuid
      union all select id::text from portal_sessions where sub_account_id = ${id}::uuid)`
}

/** One of a parent's events by its id, or null (unknown, another parent's, or past retention). */
export async function getEvent(db: Db, accountId: string, id: string): Promise<EventRow | null> {
  const [row] = await db<EventRow[]>`
    select ${db.unsafe(COLUMNS)} from events where id = ${id} and account_id = ${accountId}`
  return row ?? null
}

/**
 * One page of a parent's events, newest first, by keyset on `seq`: ordered by the column, since the
 * output's `seq` is its text, which sorts '9' above '10'. A page over a range of time or of types
 * is planned for its values each time: how many of the parent's events the range holds decides
 * between reading `seq` backwards and sorting the range, and a kept generic plan, which guesses,
 * sorted every event of a wide range (450 ms a page at 1,000,000 events, against 0.1).
 */
export function listEvents(db: Db, accountId: string, filter: EventFilter): Promise<EventPageRow[]> {
  const { type } = filter
  const s = new Statement()
  const text = `select ${COLUMNS}, seq::text as seq from events
    where account_id = ${s.param(accountId)}
      ${filter.beforeSeq === null ? '' : `and seq < ${s.param(filter.beforeSeq)}`}
      ${type === null ? '' : 'exact' in type ? `and type = ${s.param(type.exact)}` : `and type >= ${s.param(type.prefix)} and type < ${s.param(afterPrefix(type.prefix))}`}
      ${filter.targetId === null ? '' : `and target ->> 'id' = ${s.param(filter.targetId)}`}
      ${filter.subAccountId == null ? '' : `and target ->> 'id' = any(${subAccountTargets(s, filter.subAccountId)})`}
      ${filter.since === null ? '' : `and created_at >= ${s.param(filter.since)}`}
      ${filter.until === null ? '' : `and created_at < ${s.param(filter.until)}`}
    order by events.seq desc
    limit ${s.param(filter.limit)}`
  // A sub-account's targets are as many as it has keys and sessions: planned for them too.
  const ranged =
    filter.since !== null || filter.until !== null || (type !== null && 'prefix' in type) || filter.subAccountId != null
  return ranged ? s.runPlannedEachTime<EventPageRow[]>(db, text) : s.run<EventPageRow[]>(db, text)
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
