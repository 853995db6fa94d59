// The request log as the API reads it (docs/api.md, Request log): one parent's records, newest
// first. A page is read in rounds of plain statements, each planned the same way whatever the
// data: the next rows whose summaries may match (nextRows), then, in those rows, the places (row
// seq, position) of the records that do match, read from only the arrays the filters need
// (filters.ts), and their fields by position. A round that leaves the page short looks further.
import type { Sql, Tx } from '../store/db.js'
import { conditionsOf, type Fragment, PER_ROW, type RequestFilter } from './filters.js'
import { POSITIONS_PER_ROW } from './schema.js'
import { LAST_ROUND_ROWS, newestRowBefore, nextRows, type ReadBudget, WALKED_ROWS } from './row-search.js'

export interface RequestRow {
  /** The record's place (schema.ts, POSITIONS_PER_ROW): the cursor of a page ending at it. */
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
  /** null in a row written before units were kept. */
  cost: number | null
  /** The proxy forwarded it (its cost is kept negative otherwise: schema.ts); null as `cost`. */
  forwarded: boolean | null
  /** JSON by meter; null when none was reported. */
  units: string | null
  /** The shadow policies that would have refused it, joined by commas; null: none. */
  would_refuse: string | null
  /** How its exchange ended (capture.ts, RequestOutcome); `completed` in rows written before outcomes were kept. */
  outcome: string
  /** The cell that served it; null: none (a route without cells, or a row written before cells were kept). */
  cell: string | null
  /** Its trace's id; null when it was not traced. */
  trace_id: string | null
}

/** The records at `places` (a query of `seq, position`), newest first. */
export function recordsAt(sql: Sql | Tx, accountId: string, places: Fragment): Promise<RequestRow[]> {
  return sql<RequestRow[]>`
    with place as (${places})
    select (place.seq * ${sql.unsafe(PER_ROW)} + place.position)::int8 as seq,
      r.ids[place.position] as id, to_timestamp(r.times_us[place.position] / 1e6) as time, r.account_id,
      r.tenant_ids[place.position] as tenant_id, r.key_ids[place.position] as key_id,
      r.methods[place.position] as method, r.routes[place.position] as route, r.paths[place.position] as path,
      r.statuses[place.position] as status, r.codes[place.position] as code,
      (r.durations_us[place.position] / 1e3)::float8 as duration_ms, r.request_bytes[place.position] as request_bytes,
      r.response_bytes[place.position] as response_bytes, r.source_ips[place.position] as source_ip,
      abs(r.costs[place.position]) as cost, r.costs[place.position] > 0 as forwarded, r.units[place.position] as units,
      r.would_refuse[place.position] as would_refuse, coalesce(r.outcomes[place.position], 'completed') as outcome,
      r.cells[place.position] as cell,
      r.trace_ids[place.position] as trace_id
    from place join request_log_rows r on r.account_id = ${accountId} and r.seq = place.seq
    order by place.seq desc, place.position desc`
}

/** Rows a page's first round reads at least; each further round four times more, up to the last. */
const FIRST_ROUND_ROWS = 32

/**
 * What a page reads at most: the arrays of so many rows, for so long. A filter whose rows'
 * summaries match and records do not (a sub-account and a key each in a row, never in one record)
 * would otherwise read every row of the account for one page, seconds of Postgres a call. A page
 * that reaches either ends short, even empty, with the cursor of where it got to (docs/api.md,
 * Request log); the time bound lets a page go on where a cold cache makes its rows slow.
 */
export const MAX_ROWS_READ = 1_024
export const MAX_READ_MS = 500

/** A page as read: its records, and where the next begins when it ended short. */
export interface RequestsRead {
  records: RequestRow[]
  /** The place before the oldest row read (a cursor's position), or null when the page did not end short. */
  resumeBefore: string | null
}

export interface ReadLimits {
  /** Each statement's `statement_timeout`; the server's own setting when not given. */
  statementTimeoutMs?: number
  /** WALKED_ROWS, which tests make small to reach the rows past them. */
  walkedRows?: number
  /** MAX_ROWS_READ and MAX_READ_MS, which tests make small. */
  maxRowsRead?: number
  maxReadMs?: number
}

export function listRequests(
  sql: Sql,
  accountId: string,
  f: RequestFilter,
  {
    statementTimeoutMs,
    walkedRows = WALKED_ROWS,
    maxRowsRead = MAX_ROWS_READ,
    maxReadMs = MAX_READ_MS,
  }: ReadLimits = {},
): Promise<RequestsRead> {
  return sql.begin(async (tx) => {
    await readSettings(tx, statementTimeoutMs)
    return pageOf(tx, accountId, f, walkedRows, {
      rows: maxRowsRead,
      until: Date.now() + maxReadMs,
    })
  })
}

/**
 * Each statement of a read planned for its values (the generic plan Postgres may choose for a
 * prepared statement after its fifth run cannot know how rare a filter's value is: bench/README.md),
 * and limited in time when asked.
 */
export async function readSettings(tx: Tx, statementTimeoutMs: number | undefined): Promise<void> {
  const timeout =
    statementTimeoutMs === undefined ? '' : `; set local statement_timeout = ${Math.trunc(statementTimeoutMs)}`
  await tx.unsafe(`set local plan_cache_mode = force_custom_plan${timeout}`)
}

/** The cursor of a page that ended short at row `seq`: position 0, the whole row done. */
const beforeRowCursor = (seq: string) => (BigInt(seq) * BigInt(POSITIONS_PER_ROW)).toString()

async function pageOf(
  sql: Tx,
  accountId: string,
  f: RequestFilter,
  walkedRows: number,
  budget: ReadBudget,
): Promise<RequestsRead> {
  const { recordWhere, positions, ...rowConditions } = conditionsOf(sql, f)
  const records: RequestRow[] = []
  const whole = (): RequestsRead => ({ records, resumeBefore: null })
  let rowsRead = 0
  // The row of the place before which the page begins: a cursor's record is at a position of 1 or
  // more in its row, a page that ended short names its last row's position 0 (the row is done).
  let beforeRow: string | null =
    f.beforeSeq === null ? null : ((BigInt(f.beforeSeq) - 1n) / BigInt(POSITIONS_PER_ROW)).toString()
  if (f.until !== null) {
    // The newest row begun before `until`, from the index alone (it holds each row's times): the
    // rows after it are not read one by one in the round below (bench/README.md, a day's page).
    const { windowWhere } = rowConditions
    const newest = await newestRowBefore(
      sql,
      accountId,
      { until: f.until, windowWhere, upTo: beforeRow, walkedRows },
      budget,
    )
    if (newest.lookedTo !== null) return { records, resumeBefore: beforeRowCursor(newest.lookedTo) }
    if (newest.seq === null) return whole()
    beforeRow = newest.seq
  }
  // Rows found and not read yet, newest first: a round reads the next `size` of them (more each
  // round), and looks for more rows only once they are all read.
  let found: string[] = []
  let more = true
  // Where the last look for rows stopped short (the seq of the oldest row it looked at), if it did.
  let lookedTo: string | null = null
  for (let size = FIRST_ROUND_ROWS; ; size = Math.min(LAST_ROUND_ROWS, size * 4)) {
    const wanted = Math.max(size, f.limit)
    if (found.length === 0) {
      if (lookedTo !== null) return { records, resumeBefore: beforeRowCursor(lookedTo) }
      if (!more) return whole()
      const next = await nextRows(sql, accountId, { ...rowConditions, beforeRow, wanted, walkedRows }, budget)
      lookedTo = next.lookedTo
      if (next.rows.length === 0 && lookedTo === null) return whole()
      if (next.rows.length === 0) continue
      found = next.rows
      more = next.more
      beforeRow = (BigInt(found[found.length - 1]!) - 1n).toString()
    }
    const rows = found.splice(0, Math.min(wanted, budget.rows - rowsRead))
    rowsRead += rows.length
    // The rows by their seqs, in no index's order (`+ 0`): a list is then an index condition,
    // where a plan walking the index in order would test it on every row of the account.
    records.push(
      ...(await recordsAt(
        sql,
        accountId,
        sql`
        select r.seq, f.position from request_log_rows r cross join lateral ${positions}
        where r.account_id = ${accountId} and r.seq = any(${`{${rows.join(',')}}`}::int8[]) ${recordWhere}
        order by r.seq + 0 desc, f.position desc
        limit ${sql.unsafe(String(f.limit - records.length))}`,
      )),
    )
    if (records.length >= f.limit) return whole()
    const spent = rowsRead >= budget.rows || Date.now() >= budget.until
    if (spent && (found.length > 0 || more)) return { records, resumeBefore: beforeRowCursor(rows[rows.length - 1]!) }
  }
}
