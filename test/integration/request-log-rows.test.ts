// The request log's rows of records (request-log/schema.ts, rows.ts, queries.ts) on a real
// Postgres: records of any text come back as they went in; every filter and page over many small
// rows agrees with a plain reading of the records; an id the gateway made is found before a
// client's copy of it; and a log of a row a record (before the arrays) is converted whole.
import pino from 'pino'
import postgres from 'postgres'
import t from 'tap'
import { DAY_MS, dayOf, ensurePartition, partitionName } from '../../src/request-log/partitions.js'
import type { RequestFilter } from '../../src/request-log/filters.js'
import { listRequests, type ReadLimits, type RequestRow } from '../../src/request-log/queries.js'
import { requestById } from '../../src/request-log/record-by-id.js'
import type { RequestRecord } from '../../src/request-log/capture.js'
import { convertOldLog } from '../../src/request-log/conversion.js'
import { ensureRequestLogTable, RECORD_ARRAYS } from '../../src/request-log/schema.js'
import { MAX_ID_SPAN } from '../../src/request-log/made-ids.js'
import { WRITE_LOCK } from '../../src/request-log/row-copy.js'
import { RequestLogWriter } from '../../src/request-log/writer.js'
import { openOneConnection } from '../../src/store/db.js'
import { freshDatabase } from '../helpers/db.js'
import { until } from '../helpers/poll.js'
import { ACCOUNTS, logRecord as record, madeId, uuid } from '../helpers/request-records.js'
import type { TestLike } from '../helpers/test-like.js'

const NO_FILTER: RequestFilter = {
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
async function writerOn(t: TestLike, rowRecords: number, copy = true) {
  const database = await freshDatabase(t, { migrated: false })
  const writer = new RequestLogWriter({
    sql: database.sql,
    log: pino({ level: 'silent' }),
    rowRecords,
    ...(copy ? { openCopyConnection: () => openOneConnection(database.url, 'request-log-rows test') } : {}),
  })
  t.teardown(() => writer.close())
  return { sql: database.sql, url: database.url, writer }
}

/** Every page of a filter, `size` a page, following the cursors as the API does (request-routes.ts). */
async function allPages(
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
async function list(sql: Parameters<typeof listRequests>[0], account: string, filter: RequestFilter) {
  return (await listRequests(sql, account, filter)).records
}

/** The two ways rows go to Postgres (writer.ts): each test of what they hold runs with both. */
const FORMS = [
  { copy: true, form: 'binary COPY' },
  { copy: false, form: 'JSON, as to the embedded database' },
]

/** Made ids' counts across the 48 bits (a row keeps them as numbers: rows.ts), and one of another stem. */
const MADE_COUNTS = [0, 0, 2, 2 ** 24 - 1, 0, 2 ** 24 + 5, 2 ** 48 - 1]
const OTHER_STEM_ID = '01234567-89ab-4cde-8f01-00000000000a'

for (const { copy, form } of FORMS)
  t.test(`records of any text come back as they went in, each parent its own, newest first (${form})`, async (t) => {
    const { sql, writer } = await writerOn(t, 3, copy)
    const now = Date.now()
    const awkward = ['/p/"quoted"', '/p/back\\slash', '/p/a b', '/p/{brace},comma', '/p/é€😀', '/p/NULL', '/p/null']
    const records: RequestRecord[] = awkward.map((path, i) => ({
      id: i === 0 ? 'NULL' : i === 1 ? 'a"b' : i === 4 ? OTHER_STEM_ID : madeId(MADE_COUNTS[i]!),
      idGiven: i < 2,
      timeMs: now - DAY_MS + i * 1000.25,
      accountId: ACCOUNTS[i % 2]!,
      tenantId: uuid(2, i),
      keyId: uuid(3, i),
      method: i % 2 === 0 ? 'GET' : 'POST',
      route: i % 3 === 0 ? 'management' : '/api',
      path,
      status: [200, 404, 429, 503][i % 4]!,
      code: i % 4 === 2 ? 'rate_limited' : null,
      durationMs: 1.5 + i,
      requestBytes: i * 10,
      responseBytes: 2 ** 40 + i,
      sourceIp: i % 2 === 0 ? '127.0.0.1' : '::1',
    }))
    for (const record of records) writer.add(record)
    await writer.flush()
    for (const account of ACCOUNTS) {
      const expected = records.filter((r) => r.accountId === account).reverse()
      const listed = await list(sql, account, NO_FILTER)
      t.same(
        listed.map((row) => ({
          id: row.id,
          timeMs: row.time.getTime(),
          accountId: row.account_id,
          tenantId: row.tenant_id,
          keyId: row.key_id,
          method: row.method,
          route: row.route,
          path: row.path,
          status: row.status,
          code: row.code,
          durationMs: row.duration_ms,
          requestBytes: Number(row.request_bytes),
          responseBytes: Number(row.response_bytes),
          sourceIp: row.source_ip,
        })),
        expected.map(({ idGiven: _, ...r }) => ({ ...r, timeMs: Math.floor(r.timeMs) })),
        `account ${account}: every field, in order`,
      )
    }
    const [byView] = await sql<{ n: string }[]>`select count(*)::text as n from request_log where path like '/p/%'`
    t.equal(byView!.n, String(records.length), 'the view reads a record a row')
  })

for (const { copy, form } of FORMS)
  t.test(`a NUL or a lone surrogate is kept as U+FFFD, and its batch is written (${form})`, async (t) => {
    const { sql, writer } = await writerOn(t, 500, copy)
    writer.add(record({ id: madeId(1), path: '/p/nul\u0000end' }))
    writer.add(record({ id: madeId(2), path: '/p/\ud800lone' }))
    writer.add(record({ id: madeId(3), path: '/p/pair😀', sourceIp: 'a\t"{b}\\' }))
    await writer.flush()
    const listed = await list(sql, ACCOUNTS[0]!, NO_FILTER)
    t.same(
      listed.map((row) => [row.path, row.source_ip]),
      [
        ['/p/pair😀', 'a\t"{b}\\'],
        ['/p/\ufffdlone', '127.0.0.1'],
        ['/p/nul\ufffdend', '127.0.0.1'],
      ],
    )
  })

// A row writes a text that repeats the record before's as that one's bytes again (copy-format.ts):
// runs of one value, broken by another, by SQL NULL and by text of every width, come back whole,
// and each record is found by the filters of its values.
for (const { copy, form } of FORMS)
  t.test(`values repeated from the record before come back as they went in (${form})`, async (t) => {
    const { sql, writer } = await writerOn(t, 500, copy)
    const now = Date.now()
    const paths = ['/p/é€😀', '/p/é€😀', '/p/nul\u0000', '/p/nul\u0000', '/p/x', '/p/é€😀', '/p/é€😀', '/p/x']
    const codes = [null, 'rate_limited', 'rate_limited', null, null, 'rate_limited', 'scope_missing', 'scope_missing']
    const records: RequestRecord[] = paths.map((path, i) => ({
      id: madeId(100 + i),
      idGiven: false,
      timeMs: now + i,
      accountId: ACCOUNTS[0]!,
      tenantId: uuid(2, [1, 1, 2, 1, 1, 2, 2, 1][i]!),
      keyId: uuid(3, [1, 2, 2, 1, 1, 1, 2, 2][i]!),
      method: i < 4 ? 'GET' : 'DELETE',
      route: ['/api', '/api', 'management', '/api', '/api', '/api', 'management', 'management'][i]!,
      path,
      status: codes[i] === null ? [200, 0, 0, 201, 201][i]! : codes[i] === 'rate_limited' ? 429 : 403,
      code: codes[i]!,
      durationMs: 1,
      requestBytes: 0,
      responseBytes: 7,
      sourceIp: i === 7 ? '::1' : '127.0.0.1',
    }))
    for (const record of records) writer.add(record)
    await writer.flush()
    const fields = (rows: RequestRow[]) => rows.map((row) => [row.id, row.path, row.code, row.method, row.source_ip])
    const expected = (kept: RequestRecord[]) =>
      kept.reverse().map((r) => [r.id, r.path.replace('\u0000', '\ufffd'), r.code, r.method, r.sourceIp])
    const listed = await list(sql, ACCOUNTS[0]!, NO_FILTER)
    t.same(fields(listed), expected([...records]), 'every record, in order')
    const filters: [string, Partial<RequestFilter>, (r: RequestRecord) => boolean][] = [
      ['tenant 2', { tenantId: uuid(2, 2) }, (r) => r.tenantId === uuid(2, 2)],
      ['key 1', { keyId: uuid(3, 1) }, (r) => r.keyId === uuid(3, 1)],
      ['route management', { route: 'management' }, (r) => r.route === 'management'],
      ['status 201', { status: { exact: 201 } }, (r) => r.status === 201],
      ['code scope_missing', { code: 'scope_missing' }, (r) => r.code === 'scope_missing'],
    ]
    for (const [name, filter, keeps] of filters) {
      const kept = records.filter(keeps)
      t.ok(kept.length > 0 && kept.length < records.length, `${name}: some records, not all`)
      t.same(
        fields(await list(sql, ACCOUNTS[0]!, { ...NO_FILTER, ...filter })),
        expected(kept),
        `${name}: found by its summary`,
      )
    }
  })

t.test('every filter and page over many small rows agrees with the records read plainly', async (t) => {
  // Rows of three: a page reads more rows than a round's first 32 (queries.ts) for a rare match.
  const { sql, writer } = await writerOn(t, 3)
  const now = Date.now()
  const records: RequestRecord[] = []
  for (let i = 0; i < 400; i++) {
    const status = [200, 200, 201, 404, 429, 500][(i * 7) % 6]!
    records.push(
      record({
        id: madeId(1000 + i),
        timeMs: now - 60_000 + i * 100,
        accountId: ACCOUNTS[i % 3 === 0 ? 1 : 0]!,
        tenantId: uuid(2, i % 5),
        // One record in 100 by its own key: a rare match among rows of the others.
        keyId: i % 100 === 50 ? uuid(3, 99) : uuid(3, i % 7),
        route: i % 4 === 0 ? 'management' : '/api',
        path: `/api/${i}`,
        status,
        code: status === 429 ? 'rate_limited' : status === 404 ? 'not_found' : null,
      }),
    )
  }
  for (const record of records) writer.add(record)
  await writer.flush()
  const [rows] = await sql<{ n: string }[]>`select count(*)::text as n from request_log_rows`
  t.ok(Number(rows!.n) >= 400 / 3, `many rows (${rows!.n})`)

  const at = (i: number) => new Date(now - 60_000 + i * 100)
  const cases: [string, Partial<RequestFilter>, (r: RequestRecord) => boolean][] = [
    ['no filter', {}, () => true],
    ['sub-account', { tenantId: uuid(2, 3) }, (r) => r.tenantId === uuid(2, 3)],
    ['key', { keyId: uuid(3, 2) }, (r) => r.keyId === uuid(3, 2)],
    ['exact status', { status: { exact: 404 } }, (r) => r.status === 404],
    ['exact 2xx status', { status: { exact: 201 } }, (r) => r.status === 201],
    ['class 2xx', { status: { class: 2 } }, (r) => r.status < 300],
    ['class 4xx', { status: { class: 4 } }, (r) => r.status >= 400 && r.status < 500],
    ['class 5xx', { status: { class: 5 } }, (r) => r.status >= 500],
    ['code', { code: 'rate_limited' }, (r) => r.code === 'rate_limited'],
    ['route', { route: 'management' }, (r) => r.route === 'management'],
    ['since', { since: at(40) }, (r) => r.timeMs >= at(40).getTime()],
    ['until', { until: at(40) }, (r) => r.timeMs < at(40).getTime()],
    [
      'since and until',
      { since: at(20), until: at(61) },
      (r) => r.timeMs >= at(20).getTime() && r.timeMs < at(61).getTime(),
    ],
    [
      'key, class and route',
      { keyId: uuid(3, 1), status: { class: 4 }, route: '/api' },
      (r) => r.keyId === uuid(3, 1) && r.status >= 400 && r.status < 500 && r.route === '/api',
    ],
    ['a rare key', { keyId: uuid(3, 99) }, (r) => r.keyId === uuid(3, 99)],
    [
      'sub-account and class 5xx',
      { tenantId: uuid(2, 2), status: { class: 5 } },
      (r) => r.tenantId === uuid(2, 2) && r.status >= 500,
    ],
    [
      'sub-account and code',
      { tenantId: uuid(2, 4), code: 'not_found' },
      (r) => r.tenantId === uuid(2, 4) && r.code === 'not_found',
    ],
    [
      'key and exact status',
      { keyId: uuid(3, 3), status: { exact: 500 } },
      (r) => r.keyId === uuid(3, 3) && r.status === 500,
    ],
    ['a value no record has', { code: 'nothing_like_it' }, () => false],
  ]
  for (const [name, filter, matches] of cases) {
    for (const account of ACCOUNTS) {
      const expected = records
        .filter((r) => r.accountId === account && matches(r))
        .map((r) => r.id)
        .reverse()
      // Windows of 1,000 rows first, of 5 and of 1: the later windows, and past them the index alone.
      // And pages that end short, after reading 1 or 7 rows, or after a round, and go on from there.
      for (const [size, walkedRows, maxRowsRead, maxReadMs] of [
        [1, 1000, undefined, undefined],
        [3, 1000, undefined, undefined],
        [50, 1000, undefined, undefined],
        [3, 5, undefined, undefined],
        [50, 5, undefined, undefined],
        [3, 1, undefined, undefined],
        [50, 1, undefined, undefined],
        [3, 1000, 1, undefined],
        [50, 5, 7, undefined],
        [50, 1000, undefined, 0],
      ] as const) {
        const limits = { walkedRows, maxRowsRead, maxReadMs }
        const { seen } = await allPages(sql, account, { ...NO_FILTER, ...filter }, size, limits)
        t.same(
          seen.map((row) => row.id),
          expected,
          `${name}, account ${account.slice(-1)}, pages of ${size}, ${walkedRows} rows walked, at most ${maxRowsRead ?? 'all'} read for ${maxReadMs ?? 'any'} ms`,
        )
      }
    }
  }
})

t.test('a match behind many rows whose summaries pass but whose records do not is still found', async (t) => {
  const { sql, writer } = await writerOn(t, 2)
  const [account] = ACCOUNTS as [string]
  // Rows of two: key A answered 200 and key B answered 500, so every row's summary has key A and
  // 500; only the oldest row holds a record of key A answered 500.
  for (let i = 0; i < 200; i++) {
    const first = i === 0 || i % 2 === 0
    writer.add(
      record({
        id: madeId(5000 + i),
        keyId: first ? uuid(3, 1) : uuid(3, 2),
        route: first ? '/a' : '/b',
        path: `/api/${i}`,
        status: i === 0 || !first ? 500 : 200,
      }),
    )
  }
  await writer.flush()
  const keyAnd500 = { ...NO_FILTER, keyId: uuid(3, 1), status: { exact: 500 }, limit: 21 }
  t.same(
    (await list(sql, account, keyAnd500)).map((row) => row.path),
    ['/api/0'],
    'the one record, after reading all 100 rows',
  )
  // The same with a route: every row's summary has route /a and 500, rows found by the account's index.
  const byRoute = { ...NO_FILTER, route: '/a', status: { exact: 500 }, limit: 21 }
  t.same(
    (await list(sql, account, byRoute)).map((row) => row.path),
    ['/api/0'],
    'by route and status, in rounds',
  )
  // A page reads so many rows and no more: it ends short, empty here, and its cursor goes on. (The
  // key's case needs no such reading: its refusals' summary names the one row.)
  const thirty = { maxRowsRead: 30, maxReadMs: Number.POSITIVE_INFINITY }
  const short = await listRequests(sql, account, byRoute, thirty)
  t.same(short.records, [], 'a page that read 30 rows of 100 ends with none')
  t.not(short.resumeBefore, null, 'and says where the next begins')
  const { seen, pages } = await allPages(sql, account, byRoute, 20, thirty)
  t.same(
    seen.map((row) => row.path),
    ['/api/0'],
    'the record, on the last page',
  )
  t.equal(pages, 4, '100 rows read 30 a page take 4 pages')
})

t.test("an id the gateway made is found before a client's copy of it; a client's id by itself", async (t) => {
  const { sql, writer } = await writerOn(t, 2)
  const [account] = ACCOUNTS as [string]
  writer.add(record({ id: madeId(7), path: '/made' }))
  writer.add(record({ id: madeId(8), path: '/other' }))
  // A client that sends the made id later, in its own row and in the same row as another.
  writer.add(record({ id: madeId(7), idGiven: true, path: '/copy-1' }))
  writer.add(record({ id: madeId(9), path: '/after' }))
  writer.add(record({ id: madeId(7), idGiven: true, path: '/copy-2' }))
  writer.add(record({ id: 'client-id-1', idGiven: true, path: '/client-old' }))
  writer.add(record({ id: 'client-id-1', idGiven: true, path: '/client-new' }))
  await writer.flush()
  t.equal((await requestById(sql, account, madeId(7)))?.path, '/made', "the gateway's record, not the copies")
  t.equal((await requestById(sql, account, madeId(9)))?.path, '/after')
  t.equal((await requestById(sql, account, 'client-id-1'))?.path, '/client-new', "a client's id: its newest record")
  t.equal(await requestById(sql, account, madeId(10)), null, 'an id never used')
  t.equal(await requestById(sql, ACCOUNTS[1]!, madeId(7)), null, "another parent's record is not found")
})

t.test("a record whose made id is far from its row's begins a row of its own; each is found by id", async (t) => {
  const { sql, writer } = await writerOn(t, 500)
  const [account] = ACCOUNTS as [string]
  const first = 1_000_000
  writer.add(record({ id: madeId(first), path: '/first' }))
  writer.add(record({ id: madeId(first + MAX_ID_SPAN), path: '/at-the-span' }))
  writer.add(record({ id: madeId(first + MAX_ID_SPAN + 1), path: '/past-the-span' }))
  // A request that took long, answered after later ones: a row of late records; the parent's
  // open row goes on taking the others.
  writer.add(record({ id: madeId(first - 1), path: '/late' }))
  writer.add(record({ id: madeId(first + MAX_ID_SPAN + 2), path: '/next' }))
  await writer.flush()
  const rows = await sql<{ records: number; id_low: string; id_high: string }[]>`
    select records, id_low::text, id_high::text from request_log_rows order by seq`
  t.same(
    rows.map((row) => [row.records, Number(row.id_low), Number(row.id_high)]),
    [
      [2, first, first + MAX_ID_SPAN],
      [2, first + MAX_ID_SPAN + 1, first + MAX_ID_SPAN + 2],
      [1, first - 1, first - 1],
    ],
    "no row's made ids span more than MAX_ID_SPAN, and a late record does not close the open row",
  )
  for (const [count, path] of [
    [first, '/first'],
    [first + MAX_ID_SPAN, '/at-the-span'],
    [first + MAX_ID_SPAN + 1, '/past-the-span'],
    [first - 1, '/late'],
    [first + MAX_ID_SPAN + 2, '/next'],
  ] as const)
    t.equal((await requestById(sql, account, madeId(count)))?.path, path, `${path} found by its id`)
})

/** What running `statement` with `parameters` reads: its EXPLAIN's shared buffers, hit or read. */
async function buffersRead(sql: postgres.Sql, statement: string, parameters: unknown[]): Promise<number> {
  const [explained] = await sql.unsafe(`explain (analyze, buffers, format json) ${statement}`, parameters as never[])
  const plan = (explained!['QUERY PLAN'] as { Plan: Record<string, number> }[])[0]!.Plan
  return plan['Shared Hit Blocks']! + plan['Shared Read Blocks']!
}

/** A client of `url` whose statements are kept: `pagesRead` runs them again under EXPLAIN on `sql`. */
function watchedClient(t: TestLike, url: string, sql: postgres.Sql) {
  const statements: { statement: string; parameters: unknown[] }[] = []
  const watched = postgres(url, {
    max: 1,
    onnotice: () => {},
    debug: (_connection, statement, parameters) => statements.push({ statement, parameters }),
  })
  t.teardown(() => watched.end())
  return {
    watched,
    /** The pages its reads since the last ask read, hit or not. */
    async pagesRead(): Promise<number> {
      let pages = 0
      for (const { statement, parameters } of statements.splice(0))
        if (/^\s*(with|select)\b/i.test(statement)) pages += await buffersRead(sql, statement, parameters)
      return pages
    },
  }
}

t.test('a lookup by id reads a few pages, however many rows the account has', async (t) => {
  const database = await freshDatabase(t, { migrated: false })
  const sql = database.sql
  await ensureRequestLogTable(sql)
  await ensurePartition(sql, dayOf(Date.now()))
  const [account] = ACCOUNTS as [string]
  // 20,000 rows of one record, their made ids 1,024 apart (other parents' between them); the
  // client of every fourth sent the same X-Request-Id, `same`, and the newest such is the last.
  const stem = madeId(0).slice(0, 24)
  await sql.unsafe(`
    insert into request_log_rows (account_id, first_time, last_time, records, tenant_set, key_set, route_set,
      status_set, code_set, not_2xx, refused_tenant_set, refused_key_set, id_stem, id_low, id_high, given_ids,
      given_positions, ${RECORD_ARRAYS})
    select '${account}', now(), now(), 1, array['${uuid(2, 1)}'::uuid], array['${uuid(3, 1)}'::uuid], array['/api'],
      array[200::int2], '{}', false, '{}', '{}',
      case when i % 4 = 0 then null else '${stem}' end, case when i % 4 = 0 then null else i * 1024 end,
      case when i % 4 = 0 then null else i * 1024 end,
      case when i % 4 = 0 then array['same'] end, case when i % 4 = 0 then array[1] end,
      array[case when i % 4 = 0 then 'same' else '${stem}' || lpad(to_hex(i * 1024), 12, '0') end],
      array[0::int8], array['${uuid(2, 1)}'::uuid], array['${uuid(3, 1)}'::uuid], array['GET'], array['/api'],
      array['/p/' || i], array[200::int2], array[null::text], array[0::int8], array[0::int8], array[0::int8],
      array['127.0.0.1']
    from generate_series(1, 20000) i order by i`)
  // Another parent's 40,000 rows whose client sent `retry-1` every time: the planner then thought an
  // id no row holds common enough to walk the account's rows, newest first, for it.
  await sql.unsafe(`
    insert into request_log_rows (account_id, first_time, last_time, records, tenant_set, key_set, route_set,
      status_set, code_set, not_2xx, refused_tenant_set, refused_key_set, given_ids, given_positions, ${RECORD_ARRAYS})
    select '${ACCOUNTS[1]}', now(), now(), 1, array['${uuid(2, 2)}'::uuid], array['${uuid(3, 2)}'::uuid],
      array['/api'], array[200::int2], '{}', false, '{}', '{}', array['retry-1'], array[1], array['retry-1'],
      array[0::int8], array['${uuid(2, 2)}'::uuid], array['${uuid(3, 2)}'::uuid], array['GET'], array['/api'],
      array['/q/' || i], array[200::int2], array[null::text], array[0::int8], array[0::int8], array[0::int8],
      array['127.0.0.1']
    from generate_series(1, 40000) i order by i`)
  await sql.unsafe('vacuum analyze request_log_rows')
  // The lookup's statements, as postgres.js sends them (its debug hook), read again under EXPLAIN.
  const { watched, pagesRead } = watchedClient(t, database.url, sql)
  const lookups = [
    { id: madeId(8), found: null, what: 'a made id between two rows' },
    { id: madeId(19_999 * 1024), found: '/p/19999', what: 'the newest made id' },
    { id: madeId(1024), found: '/p/1', what: 'the oldest made id' },
    { id: 'absent', found: null, what: "a client's id sent by no request" },
    // The index keyed by account: another parent's rows that hold the id are never read.
    { id: 'retry-1', found: null, what: "a client's id that another parent sent 40,000 times" },
  ]
  for (const { id, found, what } of lookups) {
    t.equal((await requestById(watched, account, id))?.path ?? null, found, `${what}: ${found ?? 'not found'}`)
    const buffers = await pagesRead()
    // The account's rows alone take about 400 pages, and their index on the account 60.
    t.ok(buffers < 100, `${what}: read ${buffers} pages, fewer than 100`)
  }
  // One sent by 5,000 of the account's requests: the newest, its rows read to find it (the price
  // of a lookup that misses reading the index alone).
  t.equal((await requestById(watched, account, 'same'))?.path, '/p/20000', "a client's id sent 5,000 times: its newest")
})

// A client that sends one id with every request: the newest row holding it is found first, then
// the id in it, the row's ids read once. Each row's ids were read again for each of its given
// positions, in every row holding the id: 19 s over 8,000 rows of 500 (a review).
t.test("an id the account's own clients send with every request is found in its newest row alone", async (t) => {
  const database = await freshDatabase(t, { migrated: false })
  const sql = database.sql
  await ensureRequestLogTable(sql)
  await ensurePartition(sql, dayOf(Date.now()))
  const [account] = ACCOUNTS as [string]
  // 100 rows of 500 records, every id sent by the client: `same` for the first 250, then others.
  await sql.unsafe(`
    insert into request_log_rows (account_id, first_time, last_time, records, tenant_set, key_set, route_set,
      status_set, code_set, not_2xx, refused_tenant_set, refused_key_set, given_ids, given_positions, ${RECORD_ARRAYS})
    select '${account}', now(), now(), 500, array['${uuid(2, 1)}'::uuid], array['${uuid(3, 1)}'::uuid], array['/api'],
      array[200::int2], '{}', false, '{}', '{}',
      array['same'] || array(select md5(i || '-' || p) from generate_series(251, 500) p),
      array(select p from generate_series(1, 500) p),
      array(select case when p <= 250 then 'same' else md5(i || '-' || p) end from generate_series(1, 500) p),
      array(select 0::int8 from generate_series(1, 500)), array(select '${uuid(2, 1)}'::uuid from generate_series(1, 500)),
      array(select '${uuid(3, 1)}'::uuid from generate_series(1, 500)), array(select 'GET' from generate_series(1, 500)),
      array(select '/api' from generate_series(1, 500)), array(select '/p/' || i || '/' || p from generate_series(1, 500) p),
      array(select 200::int2 from generate_series(1, 500)), array(select null::text from generate_series(1, 500)),
      array(select 0::int8 from generate_series(1, 500)), array(select 0::int8 from generate_series(1, 500)),
      array(select 0::int8 from generate_series(1, 500)), array(select '127.0.0.1' from generate_series(1, 500))
    from generate_series(1, 100) i order by i`)
  await sql.unsafe('vacuum analyze request_log_rows')
  const { watched, pagesRead } = watchedClient(t, database.url, sql)
  t.equal((await requestById(watched, account, 'same'))?.path, '/p/100/250', 'its newest record')
  const pages = await pagesRead()
  // The rows holding it are read for their seqs (about 800 pages); each row's ids for each: 200,000.
  t.ok(pages < 5_000, `read ${pages} pages, fewer than 5,000`)
})

/** What seeded rows hold besides their route: their time (SQL), sub-account, key and answer. */
interface Seeded {
  at?: string
  tenant?: string
  key?: string
  status?: number
  code?: string | null
}

/** Rows of one record each of `account`, their route `route`, in order after those already there. */
async function seedRows(
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

t.test("a route no newer row of the account holds reads its windows, not every parent's rows", async (t) => {
  const database = await freshDatabase(t, { migrated: false })
  const sql = database.sql
  await ensureRequestLogTable(sql)
  await ensurePartition(sql, dayOf(Date.now()))
  const [mine, theirs] = ACCOUNTS as [string, string]
  // One old record of /billing, then 20,000 of /api; another parent's 60,000 of /billing.
  await seedRows(sql, mine, 1, '/billing')
  await seedRows(sql, theirs, 60_000, '/billing')
  await seedRows(sql, mine, 20_000, '/api')
  await sql.unsafe('vacuum analyze request_log_rows')
  const { watched, pagesRead } = watchedClient(t, database.url, sql)
  // Windows of 100, 400, 1,600 and 6,400 rows: 8,500 of the account's a page.
  const limits = { walkedRows: 100 }
  const billing = { ...NO_FILTER, route: '/billing', limit: 21 }
  const first = await listRequests(watched, mine, billing, limits)
  const buffers = await pagesRead()
  const [{ pages } = { pages: 0 }] = await sql<{ pages: number }[]>`
    select sum(relpages)::int as pages from pg_class c join pg_inherits i on i.inhrelid = c.oid
    where i.inhparent = 'request_log_rows'::regclass`
  t.same(first.records, [], 'the first page holds none')
  t.not(first.resumeBefore, null, 'and goes on where its windows ended')
  t.ok(buffers < pages / 2, `it read ${buffers} pages, not the ${pages} of every parent's rows`)
  const { seen, pages: followed } = await allPages(watched, mine, billing, 20, limits)
  t.same(
    seen.map((row) => row.path),
    ['/billing/1'],
    `the old record, on the last of ${followed} pages`,
  )
  t.same((await allPages(watched, theirs, billing, 100_000, limits)).seen.length, 60_000, "the other's, all")
})

// A sub-account with a route it never called: its GIN index names all its rows, each read before
// the newest can be sorted out, so past its windows a page could never answer in time for a busy
// one (an attack: 503 on every call at 2.3 million rows). That read is bounded by the page's time;
// past it, the page ends where its windows got to, and the next walks on.
t.test("a busy sub-account's rows that a route rules out are walked, never read all at once", async (t) => {
  const database = await freshDatabase(t, { migrated: false })
  const sql = database.sql
  await ensureRequestLogTable(sql)
  await ensurePartition(sql, dayOf(Date.now()))
  const [mine] = ACCOUNTS as [string]
  const [busy, other] = [uuid(2, 1), uuid(2, 2)]
  // The busy sub-account's one /billing record, oldest; then 40,000 of its /api; then another's 1,000.
  await seedRows(sql, mine, 1, '/billing', { tenant: busy })
  await seedRows(sql, mine, 40_000, '/api', { tenant: busy })
  await seedRows(sql, mine, 1_000, '/api', { tenant: other })
  await sql.unsafe('vacuum analyze request_log_rows')
  // Windows of 10 to 640 rows (850 a page), and a page's time all but spent.
  const limits = { walkedRows: 10, maxReadMs: 1 }
  const billing = { ...NO_FILTER, tenantId: busy, route: '/billing', limit: 21 }
  const first = await listRequests(sql, mine, billing, limits)
  t.same(first.records, [], 'the first page holds none')
  t.not(first.resumeBefore, null, 'and ends where its windows got to, its index read cut short')
  const { seen, pages } = await allPages(sql, mine, billing, 20, limits)
  t.same(
    seen.map((row) => row.path),
    ['/billing/1'],
    `the old record, on the last of ${pages} pages`,
  )
  t.ok(pages > 2, 'found by walking, a page at a time')
  // With the time to read it, the index finds it at once, past the windows.
  const { seen: atOnce, pages: fewer } = await allPages(sql, mine, billing, 20, { walkedRows: 10 })
  t.same([atOnce.map((row) => row.path), fewer], [['/billing/1'], 1], 'on the first page')
})

// A page with `until` first finds the newest row begun before it: the rows begun after it were
// walked in one statement (a busy parent's day: millions, past the deadline). They are counted in
// windows, within the page's time; past it, the page ends where they got to.
t.test('rows begun after `until` are counted in windows, and a page past its time ends there', async (t) => {
  const database = await freshDatabase(t, { migrated: false })
  const sql = database.sql
  await ensureRequestLogTable(sql)
  // Two hours ago is yesterday in the first two hours of a UTC day.
  await ensurePartition(sql, dayOf(Date.now() - 2 * 3_600_000))
  await ensurePartition(sql, dayOf(Date.now()))
  const [mine] = ACCOUNTS as [string]
  await seedRows(sql, mine, 5, '/early', { at: "now() - interval '2 hours'" })
  await seedRows(sql, mine, 4_000, '/api')
  await sql.unsafe('vacuum analyze request_log_rows')
  const before = { ...NO_FILTER, until: new Date(Date.now() - 3_600_000), limit: 21 }
  const early = ['/early/5', '/early/4', '/early/3', '/early/2', '/early/1']
  // Windows of 10 to 640 rows, and no time for a second.
  const limits = { walkedRows: 10, maxReadMs: 0 }
  const first = await listRequests(sql, mine, before, limits)
  t.same(first.records, [], 'the first page holds none')
  t.not(first.resumeBefore, null, 'and ends where its windows got to')
  const { seen, pages } = await allPages(sql, mine, before, 20, limits)
  t.same(
    seen.map((row) => row.path),
    early,
    `the records before \`until\`, on the last of ${pages} pages`,
  )
  t.ok(pages > 2, 'found by walking, a page at a time')
  const { seen: atOnce, pages: fewer } = await allPages(sql, mine, before, 20, { walkedRows: 10 })
  t.same([atOnce.map((row) => row.path), fewer], [early, 1], 'with the time to count them, on the first page')
})

// A quiet parent's rows lie far apart among everyone's seqs: its windows begin at its own next row,
// rather than walking the others' seqs window by window (a second at a gap of 10⁹, in a review).
t.test("before `until`, a quiet parent's windows skip the seqs of other parents' rows", async (t) => {
  const database = await freshDatabase(t, { migrated: false })
  const sql = database.sql
  await ensureRequestLogTable(sql)
  // Two hours ago is yesterday in the first two hours of a UTC day.
  await ensurePartition(sql, dayOf(Date.now() - 2 * 3_600_000))
  await ensurePartition(sql, dayOf(Date.now()))
  const [mine] = ACCOUNTS as [string]
  await seedRows(sql, mine, 1, '/early', { at: "now() - interval '2 hours'" })
  await sql.unsafe('alter table request_log_rows alter column seq restart with 1000000000')
  await seedRows(sql, mine, 50, '/api')
  const before = { ...NO_FILTER, until: new Date(Date.now() - 3_600_000), limit: 21 }
  // Windows of 160 seqs to 10,240: walked down a gap of 10⁹, they would take a hundred thousand.
  const { seen, pages } = await allPages(sql, mine, before, 20, { walkedRows: 10 })
  t.same([seen.map((row) => row.path), pages], [['/early/1'], 1], 'on the first page')
})

t.test("a page reads as many pages whatever other parents' rows hold", async (t) => {
  const database = await freshDatabase(t, { migrated: false })
  const sql = database.sql
  await ensureRequestLogTable(sql)
  await ensurePartition(sql, dayOf(Date.now()))
  const [mine, theirs] = ACCOUNTS as [string, string]
  const [myTenant, myKey] = [uuid(2, 1), uuid(3, 1)]
  // One old refusal of /billing, then 20,000 answers of /api; none of them a 503.
  await seedRows(sql, mine, 1, '/billing', { status: 429, code: 'rate_limited' })
  await seedRows(sql, mine, 20_000, '/api')
  const { watched, pagesRead } = watchedClient(t, database.url, sql)
  const filters: [string, Partial<RequestFilter>][] = [
    ['a route', { route: '/billing' }],
    ['a sub-account and a route', { tenantId: myTenant, route: '/billing' }],
    ['a status', { status: { exact: 503 } }],
    ['a code', { code: 'upstream_unavailable' }],
    ['a key and a class', { keyId: myKey, status: { class: 5 } }],
  ]
  const pagesOfEach = async () => {
    await sql.unsafe('vacuum analyze request_log_rows')
    const pages: number[] = []
    for (const [, filter] of filters) {
      await listRequests(watched, mine, { ...NO_FILTER, ...filter, limit: 21 }, { walkedRows: 100 })
      pages.push(await pagesRead())
    }
    return pages
  }
  const alone = await pagesOfEach()
  // Another parent's 60,000 rows of that route, that status and that code.
  await seedRows(sql, theirs, 60_000, '/billing', {
    tenant: uuid(2, 9),
    key: uuid(3, 9),
    status: 503,
    code: 'upstream_unavailable',
  })
  const beside = await pagesOfEach()
  // A few more for the indexes' depth, which every parent's rows share (before: 7 and 23 times more).
  for (const [i, [what]] of filters.entries())
    t.ok(beside[i]! <= alone[i]! * 1.25 + 20, `${what}: ${beside[i]} pages beside them, ${alone[i]} alone`)
})

t.test("with `since`, a route's windows count only the rows of its day on", async (t) => {
  const database = await freshDatabase(t, { migrated: false })
  const sql = database.sql
  await ensureRequestLogTable(sql)
  const today = dayOf(Date.now())
  await ensurePartition(sql, today - 1)
  await ensurePartition(sql, today)
  const [mine] = ACCOUNTS as [string]
  await seedRows(sql, mine, 20_000, '/api', { at: "now() - interval '1 day'" })
  await seedRows(sql, mine, 10, '/api')
  await sql.unsafe('vacuum analyze request_log_rows')
  const since = new Date(today * DAY_MS)
  const page = await listRequests(sql, mine, { ...NO_FILTER, route: '/billing', since, limit: 21 }, { walkedRows: 100 })
  t.same(page, { records: [], resumeBefore: null }, "the day's rows looked at, none matches: the last page")
})

t.test('a log of a row a record, from before the arrays, is converted whole once serving', async (t) => {
  const database = await freshDatabase(t, { migrated: false })
  const sql = database.sql
  const day = Math.floor(Date.now() / DAY_MS)
  const from = (d: number) => new Date(d * DAY_MS).toISOString()
  await sql.unsafe(`
    create table request_log (seq bigint generated always as identity, id text not null, time timestamptz not null,
      account_id uuid not null, tenant_id uuid not null, key_id uuid not null, method text not null, route text not null,
      path text not null, status smallint not null, code text, duration_ms real not null, request_bytes bigint not null,
      response_bytes bigint not null, source_ip text not null) partition by range (time);
    create table request_log_old_a partition of request_log for values from ('${from(day - 1)}') to ('${from(day)}');
    create table request_log_old_b partition of request_log for values from ('${from(day)}') to ('${from(day + 1)}');
    insert into request_log (id, time, account_id, tenant_id, key_id, method, route, path, status, code, duration_ms,
      request_bytes, response_bytes, source_ip)
    select 'old-' || i, to_timestamp(${day * 86_400} - 3600 + i * 3), '${ACCOUNTS[0]}'::uuid, '${uuid(2, 1)}',
      '${uuid(3, 1)}', 'GET', '/api', '/old/' || i, case when i % 10 = 0 then 429 else 200 end,
      case when i % 10 = 0 then 'rate_limited' end, 1.5, i, 2, '127.0.0.1'
    from generate_series(1, 1300) i`)
  // The start makes the rows' table only; a record written before the conversion is newer.
  await ensureRequestLogTable(sql)
  const writer = new RequestLogWriter({ sql, log: pino({ level: 'silent' }) })
  t.teardown(() => writer.close())
  writer.add(record({ id: madeId(1), path: '/new' }))
  await writer.flush()
  await convertOldLog(sql, pino({ level: 'silent' }))
  const { seen: listed } = await allPages(sql, ACCOUNTS[0]!, NO_FILTER, 500)
  t.equal(listed.length, 1301, 'every record')
  t.same(
    listed.map((row) => row.path),
    ['/new', ...Array.from({ length: 1300 }, (_, i) => `/old/${1300 - i}`)],
    'newest first, as before, the new record first',
  )
  t.equal((await requestById(sql, ACCOUNTS[0]!, 'old-1234'))?.path, '/old/1234', 'found by id')
  const { seen: refused } = await allPages(sql, ACCOUNTS[0]!, { ...NO_FILTER, code: 'rate_limited' }, 50)
  t.equal(refused.length, 130, 'found by code')
  const [kind] = await sql<{ kind: string }[]>`select relkind::text as kind from pg_class where relname = 'request_log'`
  t.equal(kind?.kind, 'v', 'the old table gave its name to the view')
  const [old] = await sql<
    { n: string }[]
  >`select count(*)::text as n from pg_class where relname like 'request_log_old_%'`
  t.equal(old?.n, '0', 'the old partitions are gone')
  await ensureRequestLogTable(sql)
  await convertOldLog(sql, pino({ level: 'silent' }))
  t.equal((await allPages(sql, ACCOUNTS[0]!, NO_FILTER, 500)).seen.length, 1301, 'a second start changes nothing')
})

t.test('a time range across days: each day kept in its partition, each record by its own time', async (t) => {
  const { sql, writer } = await writerOn(t, 500)
  const [account] = ACCOUNTS as [string]
  const midnight = Math.floor(Date.now() / DAY_MS) * DAY_MS
  // -0.0003 ms is kept as midnight to the microsecond: its row is in today's partition.
  const times = [-DAY_MS - 500, -DAY_MS / 2, -1_000, -0.4, -0.0003, 0, 0.6, 1_000, 5_000]
  for (const [i, offset] of times.entries())
    writer.add(record({ id: madeId(9000 + i), timeMs: midnight + offset, path: `/t/${i}` }))
  await writer.flush()
  const bounds: [number | null, number | null][] = [
    [0, null],
    [-DAY_MS / 2, null],
    [-DAY_MS / 2, 0],
    [-1, 1],
    [null, -DAY_MS / 2 + 1],
    [-DAY_MS, DAY_MS],
  ]
  for (const [since, until] of bounds) {
    const expected = times
      .map((offset, i) => ({ offset, path: `/t/${i}` }))
      .map(({ offset, path }) => ({ offset: Math.round(offset * 1000) / 1000, path }))
      .filter(({ offset }) => (since === null || offset >= since) && (until === null || offset < until))
      .map(({ path }) => path)
      .reverse()
    const { seen: got } = await allPages(
      sql,
      account,
      {
        ...NO_FILTER,
        since: since === null ? null : new Date(midnight + since),
        until: until === null ? null : new Date(midnight + until),
      },
      2,
    )
    t.same(
      got.map((row) => row.path),
      expected,
      `since ${since} until ${until} (ms from midnight)`,
    )
  }
})

// Another replica's retention sweep drops a day this writer still holds records of (a request that
// began on it and ended days later; or, as here, a partition gone under it): its batch is put back,
// and the day's partition is made again before the retry, rather than every retry failing alike
// while the rest of the log waits behind that batch.
t.test("a day's partition dropped under the writer is made again, and its records written", async (t) => {
  const { sql, writer } = await writerOn(t, 10)
  const day = dayOf(Date.now())
  writer.add(record({ id: madeId(1), path: '/p/before' }))
  await writer.flush()
  await sql.unsafe(`alter table request_log_rows detach partition ${partitionName(day)}`)
  await sql.unsafe(`drop table ${partitionName(day)}`)
  writer.add(record({ id: madeId(2), path: '/p/after' }))
  const paths = async () => (await sql<{ path: string }[]>`select path from request_log`).map((row) => row.path)
  t.ok(
    await until(10_000, async () => {
      await writer.flush()
      return (await paths()).includes('/p/after')
    }),
    'written once its partition is made again',
  )
  t.same(await paths(), ['/p/after'], 'the dropped day lost what it held, nothing more')
})

// Replicas write one at a time (row-copy.ts, WRITE_LOCK): a row takes its seq as its COPY runs and
// shows once committed, so two at once could show a row after a newer one, behind a reader walking
// newest first. Here the lock is held as another replica's COPY would hold it.
t.test("a writer's COPY waits for another's to commit, so rows show in their seqs' order", async (t) => {
  const { sql, url, writer } = await writerOn(t, 10)
  const other = postgres(url, { max: 1, onnotice: () => {}, fetch_types: false })
  t.teardown(() => other.end({ timeout: 1 }))
  await other`select pg_advisory_lock(${WRITE_LOCK})`
  writer.add(record({ id: madeId(1), path: '/p/waited' }))
  const flushed = writer.flush()
  const waiting = async () =>
    (
      await sql<{ n: number }[]>`
      select count(*)::int as n from pg_locks where locktype = 'advisory' and not granted
        and objid = ${WRITE_LOCK % 2 ** 32} and classid = ${Math.floor(WRITE_LOCK / 2 ** 32)}`
    )[0]!.n === 1
  t.ok(await until(5_000, waiting), "the writer's COPY waits for the lock")
  t.same(await sql`select path from request_log`, [], 'nothing written meanwhile')
  await other`select pg_advisory_unlock(${WRITE_LOCK})`
  await flushed
  t.same(
    (await sql<{ path: string }[]>`select path from request_log`).map((row) => row.path),
    ['/p/waited'],
    'written once the other is done',
  )
})
