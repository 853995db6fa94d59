// A record of the request log by its request id (docs/api.md, Request log), as the API's
// `GET …/requests/{id}` reads it.
import type { Sql, Tx } from '../store/db.js'
import { ACCOUNT_IDS_FUNCTION, accountIdsIndexed } from './account-ids-index.js'
import type { Fragment } from './filters.js'
import { MAX_ID_SPAN, madeIdParts } from './made-ids.js'
import { type ReadLimits, type RequestRow, readSettings, recordsAt } from './queries.js'

/**
 * A record by its request id. An id the gateway made is looked for first by its stem and count,
 * then an id a client sent: a client that sends another request's id in X-Request-Id gets a
 * record of its own, never in place of the gateway's (the newest, should it have sent one twice).
 * A made id reads only the rows whose highest count is within MAX_ID_SPAN (made-ids.ts) above its
 * own, from their index alone: a count that no row of the account held read every row after it. A
 * client's id reads the account's rows that hold it (a few: such ids are one request's, unless its
 * clients send one id with every request).
 */
export async function requestById(
  sql: Sql,
  accountId: string,
  id: string,
  { statementTimeoutMs }: Pick<ReadLimits, 'statementTimeoutMs'> = {},
): Promise<RequestRow | null> {
  return sql.begin(async (tx) => {
    await readSettings(tx, statementTimeoutMs)
    const made = madeIdParts(id)
    if (made !== null) {
      const [row] = await recordsAt(
        tx,
        accountId,
        // The rows that may hold it from the index alone (it holds id_low), then those rows.
        tx`
          select r.seq, f.position from (
            select id_high from request_log_rows
            where account_id = ${accountId} and id_stem = ${made.stem}
              and id_high between ${made.count}::int8 and ${made.count + MAX_ID_SPAN}::int8
              and id_low <= ${made.count}::int8) h
          join request_log_rows r on r.account_id = ${accountId} and r.id_stem = ${made.stem} and r.id_high = h.id_high
          cross join lateral (
            select u.position from unnest(r.ids) with ordinality as u(id, position)
            where u.id = ${id} and (r.given_positions is null or u.position <> all(r.given_positions))
            limit 1) f
          limit 1`,
      )
      if (row !== undefined) return row
    }
    // A client's id through its GIN index alone, whatever the planner guesses of its rows: walking
    // the account's rows, newest first, read them all for an id none holds (a lookup that misses).
    await tx`set local enable_seqscan = off`
    const [row] = await recordsAt(tx, accountId, givenIdPlaces(tx, accountId, id, await idsKeyedByAccount(sql, tx)))
    return row ?? null
  })
}

/**
 * The place of the newest record of the account whose client sent `id`: its newest row holding
 * the id, from the index of the ids keyed by account once it is valid (account-ids-index.ts), which
 * lists the account's rows alone (until then from the ids' own, which lists every parent's); then
 * the id's place in that row, its ids read once. Each row's ids read for each of its client's ids
 * took 19 s for an id a parent's clients sent with every request (8,000 rows).
 */
function givenIdPlaces(tx: Tx, accountId: string, id: string, byAccount: boolean): Fragment {
  // The index's expression, and the key it would hold for the id (the same function: one definition).
  const keyed = (args: Fragment) => tx`${tx.unsafe(ACCOUNT_IDS_FUNCTION)}(${args})`
  const holds = byAccount
    ? tx`r.given_ids is not null and ${keyed(tx`r.account_id, r.given_ids`)} @> ${keyed(tx`${accountId}::uuid, array[${id}::text]`)}`
    : tx`r.given_ids @> array[${id}::text]`
  return tx`
    select r.seq, f.position from (
      select r.seq from request_log_rows r where (r.account_id = ${accountId}) is true and ${holds}
      order by r.seq desc limit 1) newest
    join request_log_rows r on r.account_id = ${accountId} and r.seq = newest.seq
    cross join lateral (
      select u.position from unnest(r.ids) with ordinality as u(id, position)
      where u.id = ${id} and u.position = any(r.given_positions) order by u.position desc limit 1) f`
}

/** How long an index of ids keyed by account found valid is taken to stay so (an operator may drop it). */
const KEYED_CHECKED_MS = 60_000
/** When each log (by its client) was last found to have a valid index of ids keyed by account. */
const keyedFoundAt = new WeakMap<Sql, number>()

async function idsKeyedByAccount(sql: Sql, tx: Tx): Promise<boolean> {
  if (Date.now() - (keyedFoundAt.get(sql) ?? -Infinity) < KEYED_CHECKED_MS) return true
  if (!(await accountIdsIndexed(tx))) return false
  keyedFoundAt.set(sql, Date.now())
  return true
}
