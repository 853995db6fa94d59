import t from 'tap'
import type { RequestFilter } from '../../src/request-log/filters.js'
import { listRequests } from '../../src/request-log/queries.js'
import { requestById } from '../../src/request-log/record-by-id.js'
import type { RequestRecord } from '../../src/request-log/capture.js'
import { MAX_ID_SPAN } from '../../src/request-log/made-ids.js'
import { ACCOUNTS, logRecord as record, madeId, uuid } from '../helpers/request-records.js'
import { allPages, list, NO_FILTER, writerOn } from '../helpers/request-log-rows.js'

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
