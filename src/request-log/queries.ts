// The request log as the API reads it (docs/api.md, Request log): one parent's records, newest
// first by keyset on `seq`, each filter served by an index of schema.ts; a day range prunes the
// partitions it cannot touch.
import type { Sql } from '../store/db.js'

export interface RequestRow {
  seq: string
  id: string
  time: Date
  account_id: string
  tenant_id: string
  key_id: string
  method: string
  route: string
  path: string
  status: number
  code: string | null
  duration_ms: number
  request_bytes: string
  response_bytes: string
  source_ip: string
}

export interface RequestFilter {
  tenantId: string | null
  keyId: string | null
  /** An exact status, or a class (4 for 4xx). */
  status: { exact: number } | { class: number } | null
  code: string | null
  route: string | null
  /** time ≥ since. */
  since: Date | null
  /** time < until. */
  until: Date | null
  beforeSeq: string | null
  limit: number
}

const COLUMNS = `seq, id, time, account_id, tenant_id, key_id, method, route, path, status, code, duration_ms,
  request_bytes, response_bytes, source_ip`

export function listRequests(sql: Sql, accountId: string, f: RequestFilter): Promise<RequestRow[]> {
  const status = f.status
  // An exact status also names its class: the class index then serves a rare status. That index
  // holds only the answers that are not 2xx (schema.ts); the plain `<> 2` in the text, not a
  // parameter, lets a generic plan prove it may use it.
  const statusClass = status === null ? null : 'class' in status ? status.class : Math.floor(status.exact / 100)
  const during = () => sql`
    ${f.since === null ? sql`` : sql`and time >= ${f.since}`}
    ${f.until === null ? sql`` : sql`and time < ${f.until}`}`
  const matching = sql`
    where account_id = ${accountId}
      ${f.tenantId === null ? sql`` : sql`and tenant_id = ${f.tenantId}`}
      ${f.keyId === null ? sql`` : sql`and key_id = ${f.keyId}`}
      ${statusClass === null ? sql`` : sql`and status / 100 = ${statusClass}::int`}
      ${statusClass === null || statusClass === 2 ? sql`` : sql`and status / 100 <> 2`}
      ${status !== null && 'exact' in status ? sql`and status = ${status.exact}::int` : sql``}
      ${f.code === null ? sql`` : sql`and code = ${f.code}`}
      ${f.route === null ? sql`` : sql`and route = ${f.route}`}
      ${during()}
      ${f.beforeSeq === null ? sql`` : sql`and seq < ${f.beforeSeq}::int8`}`
  if (f.since === null && f.until === null && f.route === null) {
    return sql<RequestRow[]>`
      select ${sql.unsafe(COLUMNS)} from request_log ${matching}
      order by seq desc
      limit ${f.limit}`
  }
  // A time range or a route: the page's seqs first, from an index alone (schema.ts includes time,
  // route and status), then their rows. Walking newest first, a range that ends before the newest
  // records of its last day skips all of them, as a rare route skips the others, and each skipped
  // record was a read of the table (bench/README.md, Request log: a day 2.5 days ago among 10
  // million records, 56 ms before, 2 ms this way). An array rather than a join: a generic plan,
  // which cannot know the limit, planned a join of the page with all the account's rows.
  return sql<RequestRow[]>`
    select ${sql.unsafe(COLUMNS)} from request_log
    where account_id = ${accountId} ${during()}
      and seq = any(array(select seq from request_log ${matching} order by seq desc limit ${f.limit}))
    order by seq desc`
}

/** A record by its request id (the newest, should a client have sent the same id twice). */
export async function requestById(sql: Sql, accountId: string, id: string): Promise<RequestRow | null> {
  const [row] = await sql<RequestRow[]>`
    select ${sql.unsafe(COLUMNS)} from request_log
    where id = ${id} and account_id = ${accountId}
    order by seq desc limit 1`
  return row ?? null
}
