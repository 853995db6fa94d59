// A page's filters as SQL (docs/api.md, Request log): each a condition on a row's summary, which
// lets a round pass over the rows that cannot match, and one on its records, read from only the
// arrays it needs; queries.ts runs them.
import type { PendingQuery, Row } from 'postgres'
import type { Tx } from '../store/db.js'
import { DAY_MS, dayOf } from './partitions.js'
import { POSITIONS_PER_ROW } from './schema.js'

export interface RequestFilter {
  /** A sub-account of the account, or the account itself: the caller checks (request-routes.ts). */
  tenantId: string | null
  /** A key of the account's or of one of its sub-accounts': the caller checks. */
  keyId: string | null
  /** An exact status, or a class (4 for 4xx). */
  status: { exact: number } | { class: number } | null
  code: string | null
  route: string | null
  /** time ≥ since. */
  since: Date | null
  /** time < until. */
  until: Date | null
  /** Records before this place (a RequestRow's seq). */
  beforeSeq: string | null
  limit: number
}

export type Fragment = PendingQuery<Row[]>

/** POSITIONS_PER_ROW as a literal of the statement rather than a parameter. */
export const PER_ROW = String(POSITIONS_PER_ROW)

/** What each array read by a record filter is called in its `unnest`. */
const FIELD_OF: Record<string, string> = {
  tenant_ids: 'tenant_id',
  key_ids: 'key_id',
  statuses: 'status',
  codes: 'code',
  routes: 'route',
  times_us: 'time_us',
}

/** A filter's conditions on a row's summary, and on its records (the arrays they read). */
export function conditionsOf(
  sql: Tx,
  f: RequestFilter,
): {
  rowWhere: Fragment
  /** The rows a window of the account's may count at all (queries.ts, nextRows): none before `since`'s day. */
  windowWhere: Fragment
  recordWhere: Fragment
  positions: Fragment | ReturnType<Tx['unsafe']>
  byIndex: boolean
  windows: boolean
  ownValue: boolean
} {
  const arrays = new Set<string>()
  const read = (array: string) => {
    arrays.add(array)
    return sql.unsafe(`f.${FIELD_OF[array]}`)
  }
  let rowWhere = sql``
  let windowWhere = sql``
  let recordWhere = sql``
  /** A condition of the account's own values (its sub-accounts', keys', times). */
  const onRows = (condition: Fragment) => {
    rowWhere = sql`${rowWhere} ${condition}`
  }
  /**
   * A route's, status's or code's: `is true` keeps it out of their GIN indexes, which list every
   * parent's rows, so that a page reads the same whatever other parents hold (and says nothing of it).
   */
  const onSharedValue = (condition: Fragment) => {
    rowWhere = sql`${rowWhere} and (${condition}) is true`
  }
  const onRecords = (condition: Fragment) => {
    recordWhere = sql`${recordWhere} ${condition}`
  }
  const status = f.status
  const statusClass = status === null ? null : 'class' in status ? status.class : Math.floor(status.exact / 100)
  // Answers that are not 2xx only (a class or status other than 2xx, or a problem code, which comes
  // only with a refusal): a sub-account's or key's rows are then those where it has one.
  const refusals = f.code !== null || (statusClass !== null && statusClass !== 2)
  if (f.tenantId !== null) {
    onRows(sql`and r.${sql.unsafe(refusals ? 'refused_tenant_set' : 'tenant_set')} @> array[${f.tenantId}::uuid]`)
    onRecords(sql`and ${read('tenant_ids')} = ${f.tenantId}::uuid`)
  }
  if (f.keyId !== null) {
    onRows(sql`and r.${sql.unsafe(refusals ? 'refused_key_set' : 'key_set')} @> array[${f.keyId}::uuid]`)
    onRecords(sql`and ${read('key_ids')} = ${f.keyId}::uuid`)
  }
  if (status !== null) {
    // `r.not_2xx` as a literal condition: the plan may then walk the account's rows of its partial
    // index, or read a refused sub-account's or key's (their GIN indexes are partial too).
    if (statusClass !== 2) onRows(sql`and r.not_2xx`)
    if ('exact' in status) {
      onSharedValue(sql`r.status_set @> array[${status.exact}::int2]`)
      onRecords(sql`and ${read('statuses')} = ${status.exact}::int2`)
    } else {
      // Any status of the class, as an overlap.
      const inClass = Array.from({ length: 100 }, (_, n) => status.class * 100 + n)
      onSharedValue(sql`r.status_set && ${`{${inClass.join(',')}}`}::int2[]`)
      onRecords(sql`and ${read('statuses')} / 100 = ${status.class}::int`)
    }
  }
  if (f.code !== null) {
    // A problem code comes only with a refusal, never a 2xx.
    onRows(sql`and r.not_2xx`)
    onSharedValue(sql`r.code_set @> array[${f.code}::text]`)
    onRecords(sql`and ${read('codes')} = ${f.code}::text`)
  }
  if (f.route !== null) {
    onSharedValue(sql`r.route_set @> array[${f.route}::text]`)
    onRecords(sql`and ${read('routes')} = ${f.route}::text`)
  }
  if (f.since !== null) {
    // A row holds one UTC day's records (rows.ts), so one that ends after `since` begins on its day
    // or later: the second bound keeps the plan out of older days' partitions.
    const sinceDay = new Date(dayOf(f.since.getTime()) * DAY_MS)
    onRows(sql`and r.last_time >= ${f.since} and r.first_time >= ${sinceDay}`)
    windowWhere = sql`and r.first_time >= ${sinceDay}`
    onRecords(sql`and ${read('times_us')} >= ${f.since.getTime() * 1000}::int8`)
  }
  if (f.until !== null) {
    onRows(sql`and r.first_time < ${f.until}`)
    onRecords(sql`and ${read('times_us')} < ${f.until.getTime() * 1000}::int8`)
  }
  if (f.beforeSeq !== null) onRecords(sql`and r.seq * ${sql.unsafe(PER_ROW)} + f.position < ${f.beforeSeq}::int8`)
  const positions =
    arrays.size === 0
      ? sql`generate_series(r.records, 1, -1) as f(position)`
      : sql.unsafe(
          `unnest(${[...arrays].map((a) => `r.${a}`).join(', ')}) with ordinality as f(${[...arrays].map((a) => FIELD_OF[a]).join(', ')}, position)`,
        )
  return {
    rowWhere,
    windowWhere,
    recordWhere,
    positions,
    // A filter of a summary (all but the times): its rows are looked for in windows (queries.ts).
    byIndex: f.tenantId !== null || f.keyId !== null || status !== null || f.code !== null || f.route !== null,
    // A sub-account's or key's refusals are in few rows (refused_*_set): their index at once.
    windows: !(refusals && (f.tenantId !== null || f.keyId !== null)),
    // A summary's value that only this account's rows hold: its GIN index lists none of another's.
    ownValue: f.tenantId !== null || f.keyId !== null,
  }
}
