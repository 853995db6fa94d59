// The requests a limit simulation replays (docs/api.md, The limit simulator): a parent's
// sub-accounts' records of a range that reached the limits, forwarded or refused by one, in the
// order they arrived, with what each counted (its route's cost, the units its upstream reported).
import type { Sql, Tx } from '../store/db.js'
import { readSettings } from './queries.js'
import { copiedRows, type ListedRow, type RowArrays, type SentRow } from './replay-copy.js'

/** The refusals of a limit: what a replay counts as having reached the limits, beside the forwarded. */
const LIMIT_REFUSALS = new Set(['rate_limited', 'quota_exceeded'])

export interface ReplayRange {
  accountId: string
  /** One sub-account, or every sub-account of the account (null). */
  tenantId: string | null
  from: Date
  to: Date
}

/** One row of the log, as a replay reads its records: its arrays, by position. */
export interface ReplayRow {
  tenantIds: string[]
  /** When each arrived, and how long its answer took (µs). */
  timesUs: number[]
  durationsUs: number[]
  /** Each one's route cost, made positive (a refusal's is kept negative). */
  costs: number[]
  /** The units its upstream reported, by meter; null when none (the whole array, when no record reported any). */
  units: (Readonly<Record<string, number>> | null)[] | null
}

/** The rows overlapping the range that may hold a sub-account's records of it. */
function rowsOf(tx: Tx, range: ReplayRange) {
  return tx`
    from request_log_rows r
    where r.account_id = ${range.accountId} and r.last_time >= ${range.from} and r.first_time < ${range.to}
      and (${range.tenantId}::uuid is null or ${range.tenantId}::uuid = any(r.tenant_set))`
}

/** How many records the rows that overlap the range hold, at most: a bound read from the rows' summaries. */
export async function replayRecordBound(sql: Sql, range: ReplayRange, statementTimeoutMs?: number): Promise<number> {
  return sql.begin(async (tx) => {
    await readSettings(tx, statementTimeoutMs)
    const [row] = await tx<{ n: string }[]>`select coalesce(sum(r.records), 0)::text as n ${rowsOf(tx, range)}`
    return Number(row!.n)
  })
}

/** Rows a batch of the JSON read: up to 5·10^4 records (a few MB). Postgres reads the next while the caller replays this one. */
const BATCH_ROWS = 100

/** Rows a fetch of the COPY read's listing (a few hundred kB). */
const LISTED_A_FETCH = 5_000

/** How the rows are read: as a binary COPY from a Postgres server, or as JSON (the embedded PGlite takes no COPY). */
export interface ReplayReading {
  statementTimeoutMs?: number
  copy: boolean
}

/**
 * The range's records that reached the limits (forwarded, or refused by a limit), of sub-accounts
 * only, handed to `each` in the order they arrived, by their row and position. `each` returns a
 * promise only when it must wait, and the next record waits for it.
 *
 * Postgres sends whole rows, in the order of their first record (far less work for both than a
 * row per record sorted there); each row's records are put in time order, and the rows that
 * overlap (two replicas', or a slow answer's) merged: a record is handed on once no row still to
 * come can hold an earlier one.
 */
export async function replayInOrder(
  sql: Sql,
  range: ReplayRange,
  reading: ReplayReading,
  each: (row: ReplayRow, position: number) => Promise<void> | undefined,
): Promise<void> {
  const runs = new RunHeap()
  const emitUntil = async (horizonUs: number) => {
    for (let run = runs.top(); run !== undefined && run.timeUs() < horizonUs; run = runs.top()) {
      const waiting = each(run.row, run.position())
      if (waiting !== undefined) await waiting
      runs.advance()
    }
  }
  const taken = takenRecords(range)
  // One snapshot for the listing and every COPY after it.
  await sql.begin('isolation level repeatable read read only', async (tx) => {
    await readSettings(tx, reading.statementTimeoutMs)
    let rows: AsyncGenerator<SentRow>
    if (reading.copy) {
      // Listed by a cursor of the transaction's, a fetch at a time: a range of few-record rows
      // may list millions, and the COPYs run between the fetches.
      await tx`
        declare replay_rows no scroll cursor for
        select r.seq::text as seq, (extract(epoch from r.first_time) * 1000000)::int8::text as first_us, r.records
        ${rowsOf(tx, range)}
        order by r.first_time`
      rows = copiedRows(tx, range.accountId, () => tx.unsafe<ListedRow[]>(`fetch ${LISTED_A_FETCH} from replay_rows`))
    } else rows = rowsAsJson(tx, range)
    for await (const row of rows) {
      // No row still to come holds a record earlier than this one's first.
      await emitUntil(row.firstUs)
      const run = taken(row.arrays)
      if (run !== null) runs.push(run)
    }
  })
  await emitUntil(Number.POSITIVE_INFINITY)
}

/** The range's rows, in the order of their first record, as JSON, read a batch at a time by a cursor. */
async function* rowsAsJson(tx: Tx, range: ReplayRange): AsyncGenerator<SentRow> {
  // Sorted first, then made JSON row by row as they are sent: made before the sort, every row's
  // JSON would be built (and spilled to disk) before the first is sent. `offset 0` keeps it so.
  const query = tx<{ first_us: string; arrays: string }[]>`
    select (extract(epoch from r.first_time) * 1000000)::int8::text as first_us,
      json_build_array(r.tenant_ids, r.times_us, r.durations_us, r.costs, r.codes, r.units::json[])::text as arrays
    from (
      select r.first_time, r.tenant_ids, r.times_us, r.durations_us, r.costs, r.codes, r.units
      ${rowsOf(tx, range)}
      order by r.first_time offset 0
    ) as r`
  const batches = query.cursor(BATCH_ROWS)[Symbol.asyncIterator]()
  let next: Promise<IteratorResult<{ first_us: string; arrays: string }[]>> | null = null
  try {
    // Each batch is asked for before the last is replayed: its failure is heard when awaited, not
    // as an unhandled rejection meanwhile. A cursor whose query has ended answers `next()` with a
    // plain `{ done: true }`, not a promise (postgres.js): made one, so that `catch` is always there.
    next = Promise.resolve(batches.next())
    next.catch(() => {})
    for (let batch = await next; !batch.done; batch = await next) {
      next = Promise.resolve(batches.next())
      next.catch(() => {})
      for (const row of batch.value) yield { firstUs: Number(row.first_us), arrays: JSON.parse(row.arrays) }
    }
  } finally {
    // A batch still being read must arrive before the cursor can be closed: else postgres.js
    // waits for its consumer for ever, and the transaction and its connection with it.
    await next?.catch(() => {})
    await batches.return?.()
  }
}

/** What a replay takes of a row: its records in the range, of the range's sub-accounts, forwarded or refused by a limit. */
function takenRecords(range: ReplayRange): (arrays: RowArrays) => Run | null {
  const fromUs = range.from.getTime() * 1000
  const toUs = range.to.getTime() * 1000
  return ([tenantIds, timesUs, durationsUs, costs, codes, units]) => {
    const order: number[] = []
    const positive: number[] = new Array(timesUs.length)
    let sorted = true
    for (let i = 0; i < timesUs.length; i++) {
      const time = timesUs[i]!
      if (time < fromUs || time >= toUs) continue
      const tenant = tenantIds[i]!
      if (tenant === range.accountId || (range.tenantId !== null && tenant !== range.tenantId)) continue
      // A row written before costs were kept knows a limit's refusals (by code) but not its forwarded.
      const cost = costs === null ? -1 : (costs[i] ?? -1)
      if (cost <= 0 && !(cost < 0 && LIMIT_REFUSALS.has(codes[i]!))) continue
      positive[i] = Math.abs(cost)
      if (order.length > 0 && timesUs[order[order.length - 1]!]! > time) sorted = false
      order.push(i)
    }
    if (order.length === 0) return null
    if (!sorted) order.sort((a, b) => timesUs[a]! - timesUs[b]!)
    return new Run({ tenantIds, timesUs, durationsUs, costs: positive, units }, order)
  }
}

/** One row's records still to hand on, in time order. */
class Run {
  private at = 0
  readonly row: ReplayRow
  private readonly order: number[]
  constructor(row: ReplayRow, order: number[]) {
    this.row = row
    this.order = order
  }
  position(): number {
    return this.order[this.at]!
  }
  timeUs(): number {
    return this.row.timesUs[this.order[this.at]!]!
  }
  /** Moves on; false when none is left. */
  next(): boolean {
    return ++this.at < this.order.length
  }
}

/** The runs by their next record's time: a few at once (the rows that overlap in time). */
class RunHeap {
  private readonly heap: Run[] = []
  top(): Run | undefined {
    return this.heap[0]
  }
  push(run: Run): void {
    this.heap.push(run)
    this.up(this.heap.length - 1)
  }
  /** The top run moves on to its next record, or leaves when it has none. */
  advance(): void {
    const heap = this.heap
    if (!heap[0]!.next()) {
      const last = heap.pop()!
      if (heap.length === 0) return
      heap[0] = last
    }
    this.down(0)
  }
  private up(i: number): void {
    const heap = this.heap
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (heap[parent]!.timeUs() <= heap[i]!.timeUs()) return
      ;[heap[parent], heap[i]] = [heap[i]!, heap[parent]!]
      i = parent
    }
  }
  private down(i: number): void {
    const heap = this.heap
    for (;;) {
      const left = 2 * i + 1
      let least = i
      if (left < heap.length && heap[left]!.timeUs() < heap[least]!.timeUs()) least = left
      if (left + 1 < heap.length && heap[left + 1]!.timeUs() < heap[least]!.timeUs()) least = left + 1
      if (least === i) return
      ;[heap[least], heap[i]] = [heap[i]!, heap[least]!]
      i = least
    }
  }
}

/**
 * Units of the forwarded requests that arrived in [from, to), by sub-account and meter
 * (`<tenant> <meter>` → units): the part of a month's use before a simulation's range that the
 * usage periods cannot split (the one `from` falls in).
 */
export async function forwardedUnitsBetween(
  sql: Sql,
  accountId: string,
  from: Date,
  to: Date,
  statementTimeoutMs?: number,
): Promise<Map<string, number>> {
  if (to <= from) return new Map()
  const rows = await sql.begin(async (tx) => {
    await readSettings(tx, statementTimeoutMs)
    return tx<{ tenant_id: string; meter: string; units: string }[]>`
      select x.tenant_id, m.meter, sum(m.units)::text as units
      from request_log_rows r
        cross join lateral unnest(r.tenant_ids, r.times_us, r.costs, r.units) as x (tenant_id, time_us, cost, units)
        cross join lateral (
          select 'requests' as meter, x.cost::int8 as units
          union all
          select reported.key, reported.value::int8 from jsonb_each_text(coalesce(x.units, '{}')::jsonb) as reported
        ) as m
      where r.account_id = ${accountId} and r.last_time >= ${from} and r.first_time < ${to}
        and x.cost > 0 and x.time_us >= ${from.getTime() * 1000} and x.time_us < ${to.getTime() * 1000}
        and x.tenant_id <> ${accountId}
      group by 1, 2`
  })
  return new Map(rows.map((row) => [`${row.tenant_id} ${row.meter}`, Number(row.units)]))
}
