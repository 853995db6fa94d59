// What the request-log-rows-*.test.ts files share: a writer on a fresh database, reads page by
// page as the API reads them, rows seeded straight into Postgres, and the pages a read costs.
// Nothing here is shared between files: each test makes its own database (test/helpers/db.ts).
import pino from 'pino'
import postgres from 'postgres'
import type { RequestFilter } from '../../src/request-log/filters.js'
import { listRequests, type ReadLimits, type RequestRow } from '../../src/request-log/queries.js'
import { RECORD_ARRAYS } from '../../src/request-log/schema.js'
import { RequestLogWriter } from '../../src/request-log/writer.js'
import { openOneConnection } from '../../src/store/db.js'
import { freshDatabase } from './db.js'
import { sleep } from './poll.js'
import { uuid } from './request-records.js'
import type { TestLike } from './test-like.js'

export const NO_FILTER: RequestFilter = {
  tenantId: null,
  keyId: null,
  status: null,
  code: null,
  route: null,
  since: null,
  until: null,
  beforeSeq: null,
  limit: 1000,
}

/** A writer on a fresh database; `copy: false` writes as it does to the embedded one (JSON). */
export async function writerOn(t: TestLike, rowRecords: number, copy = true) {
  const database = await freshDatabase(t, { migrated: false })
  const writer = new RequestLogWriter({
    sql: database.sql,
    log: pino({ level: 'silent' }),
    rowRecords,
    ...(copy ? { openCopyConnection: () => openOneConnection(database.url, 'request-log-rows test') } : {}),
  })
  t.teardown(() => writer.close())
  // A flush that failed (a timeout on a loaded machine) keeps its records for a retry and returns:
  // a test's flush waits until they are written, not only tried.
  const flushOnce = writer.flush.bind(writer)
  writer.flush = async () => {
    await flushOnce()
    for (let tries = 0; writer.pending > 0; tries++) {
      if (tries === 200) throw new Error(`the request log kept ${writer.pending} records unwritten for 10 s`)
      await sleep(50)
      await flushOnce()
    }
  }
  return { sql: database.sql, url: database.url, writer }
}

/** Every page of a filter, `size` a page, following the cursors as the API does (request-routes.ts). */
export async function allPages(
  sql: Parameters<typeof listRequests>[0],
  account: string,
  filter: RequestFilter,
  size: number,
  limits: ReadLimits = {},
) {
  const seen: RequestRow[] = []
  let beforeSeq: string | null = null
  for (let pages = 1; ; pages++) {
    const { records, resumeBefore } = await listRequests(
      sql,
      account,
      { ...filter, beforeSeq, limit: size + 1 },
      limits,
    )
    seen.push(...records.slice(0, size))
    if (resumeBefore !== null) beforeSeq = resumeBefore
    else if (records.length <= size) return { seen, pages }
    else beforeSeq = records[size - 1]!.seq
  }
}

/** One page's records. */
export async function list(sql: Parameters<typeof listRequests>[0], account: string, filter: RequestFilter) {
  return (await listRequests(sql, account, filter)).records
}

/** The two ways rows go to Postgres (writer.ts): each test of what they hold runs with both. */
export const FORMS = [
  { copy: true, form: 'binary COPY' },
  { copy: false, form: 'JSON, as to the embedded database' },
]

/** Made ids' counts across the 48 bits (a row keeps them as numbers: rows.ts), and one of another stem. */
export const MADE_COUNTS = [0, 0, 2, 2 ** 24 - 1, 0, 2 ** 24 + 5, 2 ** 48 - 1]
export const OTHER_STEM_ID = '01234567-89ab-4cde-8f01-00000000000a'

/** What running `statement` with `parameters` reads: its EXPLAIN's shared buffers, hit or read. */
export async function buffersRead(sql: postgres.Sql, statement: string, parameters: unknown[]): Promise<number> {
  const [explained] = await sql.unsafe(`explain (analyze, buffers, format json) ${statement}`, parameters as never[])
  const plan = (explained!['QUERY PLAN'] as { Plan: Record<string, number> }[])[0]!.Plan
  return plan['Shared Hit Blocks']! + plan['Shared Read Blocks']!
}

/**
 * A client of `url` whose statements are kept, in the order sent (`statements`): `pagesRead` runs
 * those since its last call again under EXPLAIN on `sql`.
 */
export function watchedClient(t: TestLike, url: string, sql: postgres.Sql) {
  const statements: { statement: string; parameters: unknown[] }[] = []
  const watched = postgres(url, {
    max: 1,
    onnotice: () => {},
    debug: (_connection, statement, parameters) => statements.push({ statement, parameters }),
  })
  t.teardown(() => watched.end())
  return {
    watched,
    statements,
    /** The pages its reads since the last ask read, hit or not. */
    async pagesRead(): Promise<number> {
      let pages = 0
      for (const { statement, parameters } of statements.splice(0))
        if (/^\s*(with|select)\b/i.test(statement)) pages += await buffersRead(sql, statement, parameters)
      return pages
    },
  }
}

/** What seeded rows hold besides their route: their time (SQL), sub-account, key and answer. */
export interface Seeded {
  at?: string
  tenant?: string
  key?: string
  status?: number
  code?: string | null
}

/** Rows of one record each of `account`, their route `route`, in order after those already there. */
export async function seedRows(
  sql: postgres.Sql,
  account: string,
  rows: number,
  route: string,
  { at = 'now()', tenant = uuid(2, 1), key = uuid(3, 1), status = 200, code = null }: Seeded = {},
): Promise<void> {
  const refused = status < 200 || status > 299
  const refusedOf = (id: string) => (refused ? `array['${id}'::uuid]` : "'{}'")
  const codeText = code === null ? 'null::text' : `'${code}'`
  await sql.unsafe(`
    insert into request_log_rows (account_id, first_time, last_time, records, tenant_set, key_set, route_set,
      status_set, code_set, not_2xx, refused_tenant_set, refused_key_set, ${RECORD_ARRAYS})
    select '${account}', ${at}, ${at}, 1, array['${tenant}'::uuid], array['${key}'::uuid],
      array['${route}'], array[${status}::int2], ${code === null ? "'{}'" : `array[${codeText}]`}, ${refused},
      ${refusedOf(tenant)}, ${refusedOf(key)}, array['id-' || i], array[0::int8],
      array['${tenant}'::uuid], array['${key}'::uuid], array['GET'], array['${route}'],
      array['${route}/' || i], array[${status}::int2], array[${codeText}], array[0::int8], array[0::int8], array[0::int8],
      array['127.0.0.1']
    from generate_series(1, ${rows}) i order by i`)
}
