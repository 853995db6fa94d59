// The simulator's read of a Postgres server (replay-records.ts): the rows' arrays as a binary COPY,
// a batch of rows a statement. Postgres sends each value as it keeps it, with no JSON to build,
// and the process reads numbers and ids off the bytes: over 10^7 records, far less work on both
// sides than the JSON the embedded PGlite is read as (bench/README.md, the limit simulator).
import type { Tx } from '../store/db.js'
import { CopyTuples, int8Field, nextField, numbersField, textsField, UuidTexts } from './copy-tuples.js'

/** A row's arrays as the replay reads them: tenant ids, times, durations, costs, codes, units. */
export type RowArrays = [
  string[],
  number[],
  number[],
  (number | null)[] | null,
  (string | null)[],
  (Record<string, number> | null)[] | null,
]

/** A row as it is read, with the time of its first record (µs): rows come in the order of it. */
export interface SentRow {
  firstUs: number
  arrays: RowArrays
}

/** A row to read, as the listing of a range's rows names it. */
export interface ListedRow {
  seq: string
  first_us: string
  records: number
}

/**
 * A COPY's rows: up to this many, and no more once they hold this many records. Each COPY is a
 * statement under the read's `statement_timeout` while the process replays what it sends (2·10^5
 * records: a fraction of a second); each also costs a round trip.
 */
const COPY_ROWS = 2_000
const COPY_RECORDS = 200_000

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
const DIGITS = /^-?\d{1,19}$/

/**
 * An account's rows, as a listing in their order hands them on (`nextListed`: the next few, none
 * at its end), read a batch at a time as COPYs.
 */
export async function* copiedRows(
  tx: Tx,
  accountId: string,
  nextListed: () => Promise<readonly ListedRow[]>,
): AsyncGenerator<SentRow> {
  const uuids = new UuidTexts()
  let listed: readonly ListedRow[] = []
  let at = 0
  let listingEnded = false
  while (!listingEnded) {
    const batch: ListedRow[] = []
    let records = 0
    while (batch.length < COPY_ROWS && records < COPY_RECORDS) {
      if (at === listed.length) {
        listed = await nextListed()
        at = 0
        listingEnded = listed.length === 0
        if (listingEnded) break
      }
      const row = listed[at++]!
      batch.push(row)
      records += row.records
    }
    if (batch.length > 0)
      yield* rowsOf(tx.unsafe(`copy (${batchSelect(accountId, batch)}) to stdout (format binary)`), batch.length, uuids)
  }
}

/**
 * The select a COPY sends: a batch's rows, found by their seqs, bound to their days' partitions by
 * their times. A COPY takes no parameters, so the values it names are checked to be what they
 * must be before they are written into it: the account's id, the rows' seqs and times.
 */
export function batchSelect(accountId: string, batch: readonly ListedRow[]): string {
  if (!UUID.test(accountId)) throw new Error(`request log: ${accountId} is not an account id`)
  for (const row of batch)
    if (!DIGITS.test(row.seq) || !DIGITS.test(row.first_us)) throw new Error('request log: a row listed as no number')
  return `select (extract(epoch from r.first_time) * 1000000)::int8, r.tenant_ids, r.times_us, r.durations_us, r.costs,
      r.codes, r.units
    from request_log_rows r
    where r.account_id = '${accountId}' and r.seq = any('{${batch.map((row) => row.seq).join(',')}}'::int8[])
      and r.first_time >= timestamptz 'epoch' + ${batch[0]!.first_us} * interval '1 microsecond'
      and r.first_time <= timestamptz 'epoch' + ${batch[batch.length - 1]!.first_us} * interval '1 microsecond'
    order by r.first_time`
}

/** The rows one COPY sends (`expected` of them), each as soon as its tuple has arrived. */
async function* rowsOf(query: ReturnType<Tx['unsafe']>, expected: number, uuids: UuidTexts): AsyncGenerator<SentRow> {
  const arrived: SentRow[] = []
  let sent = 0
  const tuples = new CopyTuples((data, at, fields) => {
    sent++
    arrived.push(rowOf(data, at, fields, uuids))
  })
  const chunks = (await query.readable())[Symbol.asyncIterator]()
  let done = false
  try {
    while (!done) {
      const chunk = await chunks.next()
      done = chunk.done === true
      if (!done) tuples.push(chunk.value as Buffer)
      for (const row of arrived) yield row
      arrived.length = 0
    }
    if (!tuples.ended) throw new Error('request log: a COPY of rows ended before its trailer')
    // The rows are found by seq, bounded by their times: one whose time were read otherwise than
    // listed would be missed, not merely slow.
    if (sent !== expected) throw new Error(`request log: a COPY sent ${sent} rows of the ${expected} listed`)
  } finally {
    // Left early (the replay failed): the rest of the batch is read and dropped, since the COPY
    // cannot be stopped (postgres.js 3.4.9 cancels only a query it has not begun to answer).
    while (!done) done = (await chunks.next().catch(() => ({ done: true }))).done === true
  }
}

/** A tuple of the COPY as a row: the first record's time, then the arrays of RowArrays, in that order. */
export function rowOf(data: Buffer, at: number, fields: number, uuids: UuidTexts): SentRow {
  if (fields !== 7) throw new Error(`request log: a COPY's row of ${fields} fields, not 7`)
  const firstUs = int8Field(data, at)
  at = nextField(data, at)
  const tenantIds = uuids.field(data, at)!
  at = nextField(data, at)
  const timesUs = numbersField(data, at) as number[]
  at = nextField(data, at)
  const durationsUs = numbersField(data, at) as number[]
  at = nextField(data, at)
  const costs = numbersField(data, at)
  at = nextField(data, at)
  const codes = textsField(data, at)!
  at = nextField(data, at)
  const units = textsField(data, at)?.map((json) => (json === null ? null : JSON.parse(json))) ?? null
  return { firstUs, arrays: [tenantIds, timesUs, durationsUs, costs, codes, units] }
}
