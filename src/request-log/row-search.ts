// Which of an account's rows may hold a page's records (queries.ts reads the records in them):
// its newest rows in windows, each found from the account's own index, then a sub-account's or
// key's GIN index over the rest, as long as the page's time allows.
import { LATEST_MS } from '../dates.js'
import type { Tx } from '../store/db.js'
import type { conditionsOf, Fragment } from './filters.js'
import { DAY_MS } from './partitions.js'

/** A statement ended by its `statement_timeout` (or by an operator's cancel). */
const QUERY_CANCELED = '57014'

/** Rows a round reads at most (queries.ts), and the rows a sub-account's index is read for at once. */
export const LAST_ROUND_ROWS = 4_096

/** What a page may still spend: rows read, and time (until then, epoch ms). */
export interface ReadBudget {
  rows: number
  until: number
}

/** A round's first window: the account's newest rows looked at before older ones. */
export const WALKED_ROWS = 1_000
/**
 * The last window is this many times the first (64,000 rows); past it, a sub-account's or key's own
 * index alone, and a page of any other filter ends short.
 */
const LAST_WINDOW_TIMES = 64

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
export async function nextRows(
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
 * The newest of the account's rows begun before `until` (at or below `upTo`). A single statement
 * walked every row begun after `until` (a busy parent's day: millions, past any deadline), so the
 * walk goes in windows of seqs, newest first: WALKED_ROWS × 16 seqs, then four times more up to
 * LAST_WINDOW_TIMES × that, each holding at most as many of the account's rows (read from its
 * index alone, which holds each row's first time), while the page has time; past it, `lookedTo` is
 * the lowest seq looked at. Windows of seqs rather than of rows: a bound on the index's own
 * condition costs nothing a row, where counting rows cost half again as much as the walk. Each
 * window begins at the account's newest row below the last: a quiet parent's rows far apart in
 * the seqs of all parents are not looked for in empty windows.
 * Rows of a day after `until`'s are never looked at (their partitions are left out of the plan);
 * `windowWhere`, the same for `since`.
 */
export async function newestRowBefore(
  sql: Tx,
  accountId: string,
  {
    until,
    windowWhere,
    upTo,
    walkedRows,
  }: { until: Date; windowWhere: Fragment; upTo: string | null; walkedRows: number },
  budget: ReadBudget,
): Promise<{ seq: string | null; lookedTo: string | null }> {
  // At most the last instant a client may name (dates.ts): 9999-12-31's next midnight is the year
  // 10000, which the store cannot read as sent (22009), and which no row is before `until` anyway.
  const lastDay = new Date(Math.min(Math.ceil(until.getTime() / DAY_MS) * DAY_MS, LATEST_MS))
  // The account's newest row at or below `seq` that may be before `until`: where a window begins.
  const newestFrom = async (seq: string | null) =>
    (
      await sql<{ seq: string }[]>`
        select seq from request_log_rows r where account_id = ${accountId} and first_time < ${lastDay} ${windowWhere}
          ${seq === null ? sql`` : sql`and seq <= ${seq}::int8`}
        order by seq desc limit 1`
    )[0]?.seq
  let newest = await newestFrom(upTo)
  const firstSpan = BigInt(walkedRows * 16)
  const lastSpan = firstSpan * BigInt(LAST_WINDOW_TIMES)
  for (let span = firstSpan; newest !== undefined; span = span < lastSpan ? span * 4n : span) {
    const high = BigInt(newest)
    const low = high - span + 1n
    const [found] = await sql<{ seq: string }[]>`
      select seq from request_log_rows r where account_id = ${accountId} and first_time < ${until} ${windowWhere}
        and seq between ${low.toString()}::int8 and ${high.toString()}::int8
      order by seq desc limit 1`
    if (found !== undefined) return { seq: found.seq, lookedTo: null }
    // The next window begins at the account's next row: the seqs between are other parents'.
    newest = await newestFrom((low - 1n).toString())
    if (newest !== undefined && Date.now() >= budget.until)
      return { seq: null, lookedTo: (BigInt(newest) + 1n).toString() }
  }
  return { seq: null, lookedTo: null }
}

/**
 * The least time a search of a sub-account's or key's own index is begun with, in ms: a cancelled
 * search is rolled back under the same short `statement_timeout` (below), which a loaded server
 * could overrun were it a millisecond or two.
 */
const MIN_SEARCH_MS = 20

/**
 * The next rows of a sub-account's or key's, from its GIN index over all the account's rows older
 * than `upTo` (the index lists only this account's rows), LAST_ROUND_ROWS at once; null when that
 * takes longer than the page may. The index names every row of the sub-account, and each is read
 * before the newest can be sorted out: a busy one's that its other conditions rule out (a route
 * it never called) would be millions, every page, past any deadline. The page then ends short
 * where its windows got to, and the next walks on from there.
 *
 * The page's time left is the search's `statement_timeout`, set in a savepoint. The search itself
 * puts the page's own back (`set_config` in the same statement): a statement's timeout is fixed as
 * it begins, and any later statement begun under the short one (a `SET` back, on a loaded server)
 * could be cancelled outside the savepoint, ending the whole page in an error. A cancelled search
 * is rolled back to the savepoint, which puts back the page's own too.
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
  // The account and the place as no index condition (`is true`): each would let the plan read an
  // index of every parent's rows (the account's index from its second column on, for the place);
  // and no reading of the table itself, whose rows are every parent's. The statements after this
  // one in the page are all index lookups.
  await sql`set local enable_seqscan = off`
  const leftMs = Math.round(budget.until - Date.now())
  if (leftMs < MIN_SEARCH_MS) return null
  try {
    const seqs = await sql.savepoint(async (bounded) => {
      // The page's own timeout read in a subquery (`offset 0`: run before the outer `set_config`).
      const [own] = await bounded<{ timeout: string }[]>`
        select was.timeout, set_config('statement_timeout', ${String(leftMs)}, true)
        from (select current_setting('statement_timeout') as timeout offset 0) was`
      const [found] = await bounded<{ seqs: string[] }[]>`
        select to_json(array(
          select seq::text from request_log_rows r where (account_id = ${accountId}) is true ${rowWhere}
            ${upTo === null ? bounded`` : bounded`and (seq <= ${upTo}::int8) is true`}
          order by r.seq desc limit ${bounded.unsafe(String(olderWanted))}
        )) as seqs, set_config('statement_timeout', ${own!.timeout}, true)`
      return found!.seqs
    })
    return { rows: seqs, more: seqs.length === olderWanted, lookedTo: null }
  } catch (err) {
    if ((err as { code?: string }).code !== QUERY_CANCELED) throw err
    return null
  }
}
