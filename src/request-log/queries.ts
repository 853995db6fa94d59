// The request log as the API reads it (docs/api.md, Request log): one parent's records, newest
// first. A page is read in rounds of plain statements, each planned the same way whatever the
// data: the next rows whose summaries may match (nextRows), then, in those rows, the places (row
// seq, position) of the records that do match, read from only the arrays the filters need
// (filters.ts), and their fields by position. A round that leaves the page short looks further.
import type { Sql, Tx } from '../store/db.js'
import { conditionsOf, type Fragment, PER_ROW, type RequestFilter } from './filters.js'
import { POSITIONS_PER_ROW } from './schema.js'

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
      r.response_bytes[place.position] as response_bytes, r.source_ips[place.position] as source_ip
    from place join request_log_rows r on r.account_id = ${accountId} and r.seq = place.seq
    order by place.seq desc, place.position desc`
}

/** A statement ended by its `statement_timeout` (or by an operator's cancel). */
const QUERY_CANCELED = '57014'

/** Rows a page's first round reads at least; each further round four times more, up to the last. */
const FIRST_ROUND_ROWS = 32
const LAST_ROUND_ROWS = 4_096

/**
 * What a page reads at most: the arrays of so many rows, for so long. A filter whose rows'
 * summaries match and records do not (a sub-account and a key each in a row, never in one record)
 * would otherwise read every row of the account for one page, seconds of Postgres a call. A page
 * that reaches either ends short, even empty, with the cursor of where it got to (docs/api.md,
 * Request log); the time bound lets a page go on where a cold cache makes its rows slow.
 */
export const MAX_ROWS_READ = 1_024
export const MAX_READ_MS = 500

/** What a page may still spend: rows read, time, and each statement's own limit (undefined: the server's). */
interface ReadBudget {
  rows: number
  until: number
  statementTimeoutMs: number | undefined
}

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

/** A round's first window: the account's newest rows looked at before older ones. */
const WALKED_ROWS = 1_000
/**
 * The last window is this many times the first (64,000 rows); past it, a sub-account's or key's own
 * index alone, and a page of any other filter ends short.
 */
const LAST_WINDOW_TIMES = 64

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
      statementTimeoutMs,
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
    const [newest] = await sql<{ seq: string }[]>`
      select seq from request_log_rows
      where account_id = ${accountId} and first_time < ${f.until}
        ${beforeRow === null ? sql`` : sql`and seq <= ${beforeRow}::int8`}
      order by seq desc limit 1`
    if (newest === undefined) return whole()
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
      if (lookedTo !== null) return { records, resumeBefore: (BigInt(lookedTo) * BigInt(POSITIONS_PER_ROW)).toString() }
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
    if (spent && (found.length > 0 || more))
      return { records, resumeBefore: (BigInt(rows[rows.length - 1]!) * BigInt(POSITIONS_PER_ROW)).toString() }
  }
}

/**
 * The seqs of the next `wanted` rows whose summaries may match, newest first, and whether there
 * may be more. With a filter of a summary (a sub-account, a key, a route, a status, a code), the
 * account's rows are looked at in windows (unless `windows` is false), its newest WALKED_ROWS, then
 * four times more each time: each window is found from the account's index alone, and its rows
 * that may match within it (through a sub-account's or key's GIN index, or read: a route's, a
 * status's or a code's index lists every parent's rows, filters.ts). Past the last window, a
 * sub-account or key that rare is found by its GIN index over all the rest, the account then a
 * filter (as a second index, intersected with the first, it cost a read of all its entries),
 * LAST_ROUND_ROWS at once (read and sorted whatever the limit; bench/README.md). A filter of
 * neither (`ownValue` false) stops there instead, and says where (`lookedTo`).
 */
async function nextRows(
  sql: Tx,
  accountId: string,
  {
    rowWhere,
    windowWhere,
    byIndex,
    windows,
    ownValue,
    beforeRow,
    wanted,
    walkedRows,
  }: Omit<ReturnType<typeof conditionsOf>, 'recordWhere' | 'positions'> & {
    beforeRow: string | null
    wanted: number
    walkedRows: number
  },
  budget: ReadBudget,
): Promise<{ rows: string[]; more: boolean; lookedTo: string | null }> {
  const before = beforeRow === null ? sql`` : sql`and seq <= ${beforeRow}::int8`
  const limit = (n: number) => sql.unsafe(String(n))
  const seqs = (rows: { seq: string }[]) => rows.map((row) => row.seq)
  if (!byIndex) {
    const rows = seqs(
      await sql<{ seq: string }[]>`
      select seq from request_log_rows r where account_id = ${accountId} ${rowWhere} ${before}
      order by seq desc limit ${limit(wanted)}`,
    )
    return { rows, more: rows.length === wanted, lookedTo: null }
  }
  const rows: string[] = []
  let upTo = beforeRow
  // A sub-account's or key's refusals, in few rows: their index at once, the windows after it
  // only should that take longer than the page may (below).
  if (!windows) {
    const older = await ownIndexRows(sql, accountId, rowWhere, upTo, wanted, budget)
    if (older !== null) return older
  }
  for (let span = walkedRows; ; span *= 4) {
    const below = upTo === null ? sql`` : sql`and seq <= ${upTo}::int8`
    // The account's next `span` rows, from its index alone; then those of them that may match.
    const [edge] = await sql<{ seq: string }[]>`
      select seq from request_log_rows r where account_id = ${accountId} ${windowWhere} ${below}
      order by seq desc offset ${limit(span - 1)} limit 1`
    rows.push(
      ...seqs(
        await sql<{ seq: string }[]>`
        select seq from request_log_rows r where account_id = ${accountId} ${rowWhere} ${below}
          ${edge === undefined ? sql`` : sql`and seq >= ${edge.seq}::int8`}
        order by seq desc limit ${limit(wanted - rows.length)}`,
      ),
    )
    if (rows.length === wanted) return { rows, more: true, lookedTo: null }
    if (edge === undefined) return { rows, more: false, lookedTo: null }
    upTo = (BigInt(edge.seq) - 1n).toString()
    if (span >= walkedRows * LAST_WINDOW_TIMES) {
      if (!ownValue || !windows) return { rows, more: true, lookedTo: edge.seq }
      const older = await ownIndexRows(sql, accountId, rowWhere, upTo, wanted - rows.length, budget)
      if (older === null) return { rows, more: true, lookedTo: edge.seq }
      return { rows: [...rows, ...older.rows], more: older.more, lookedTo: null }
    }
  }
}

/**
 * The next rows of a sub-account's or key's, from its GIN index over all the account's rows older
 * than `upTo` (the index lists only this account's rows), LAST_ROUND_ROWS at once; null when that
 * takes longer than the page may. The index names every row of the sub-account, and each is read
 * before the newest can be sorted out: a busy one's that its other conditions rule out (a route
 * it never called) would be millions, every page, past any deadline. The page then ends short
 * where its windows got to, and the next walks on from there.
 */
async function ownIndexRows(
  sql: Tx,
  accountId: string,
  rowWhere: Fragment,
  upTo: string | null,
  wanted: number,
  budget: ReadBudget,
): Promise<{ rows: string[]; more: boolean; lookedTo: null } | null> {
  const olderWanted = Math.max(wanted, LAST_ROUND_ROWS)
  const leftMs = Math.max(1, Math.round(budget.until - Date.now()))
  try {
    const rows = await sql.savepoint(async (bounded) => {
      await bounded.unsafe(`set local statement_timeout = ${leftMs}`)
      // The account and the place as no index condition (`is true`): each would let the plan read
      // an index of every parent's rows (the account's index from its second column on, for the
      // place); and no reading of the table itself, whose rows are every parent's. The statements
      // after this one in the page are all index lookups.
      await bounded`set local enable_seqscan = off`
      return bounded<{ seq: string }[]>`
        select seq from request_log_rows r where (account_id = ${accountId}) is true ${rowWhere}
          ${upTo === null ? bounded`` : bounded`and (seq <= ${upTo}::int8) is true`}
        order by seq desc limit ${bounded.unsafe(String(olderWanted))}`
    })
    const seqs = rows.map((row) => row.seq)
    return { rows: seqs, more: seqs.length === olderWanted, lookedTo: null }
  } catch (err) {
    if ((err as { code?: string }).code !== QUERY_CANCELED) throw err
    return null
  } finally {
    // What the savepoint set stays set once it is released: the page's own limit back.
    const timeout = budget.statementTimeoutMs === undefined ? 'default' : String(Math.trunc(budget.statementTimeoutMs))
    await sql.unsafe(`set local statement_timeout = ${timeout}; set local enable_seqscan = off`)
  }
}
