import t from 'tap'
import { DAY_MS, dayOf, ensurePartition } from '../../src/request-log/partitions.js'
import type { RequestFilter } from '../../src/request-log/filters.js'
import { listRequests } from '../../src/request-log/queries.js'
import { requestById } from '../../src/request-log/record-by-id.js'
import { ensureRequestLogTable, RECORD_ARRAYS } from '../../src/request-log/schema.js'
import { freshDatabase } from '../helpers/db.js'
import { ACCOUNTS, madeId, uuid } from '../helpers/request-records.js'
import { allPages, NO_FILTER, seedRows, watchedClient } from '../helpers/request-log-rows.js'

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
  // All in one day's partition, yesterday's: rows in another partition than `until`'s would be
  // passed over by partition pruning, not walked (between 00:00 and 02:00 UTC, "two hours ago" was).
  const yesterday = Date.now() - DAY_MS
  const day = new Date(yesterday).toISOString().slice(0, 10)
  await ensurePartition(sql, dayOf(yesterday))
  const [mine] = ACCOUNTS as [string]
  await seedRows(sql, mine, 5, '/early', { at: `'${day}T10:00:00Z'::timestamptz` })
  await seedRows(sql, mine, 4_000, '/api', { at: `'${day}T12:00:00Z'::timestamptz` })
  await sql.unsafe('vacuum analyze request_log_rows')
  const before = { ...NO_FILTER, until: new Date(`${day}T11:00:00Z`), limit: 21 }
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

// A sub-account's index search runs under the page's time left as its `statement_timeout`. A
// statement begun under it after the search (a SET back, say) could be cancelled on a loaded
// server outside the search's savepoint, and end the whole page in an error: the search alone
// begins under it. The page's statements are run again one by one on a connection of the same
// database, each after asking Postgres which timeout it begins under.
t.test('of a page, only the index search begins under its short statement_timeout', async (t) => {
  const database = await freshDatabase(t, { migrated: false })
  const sql = database.sql
  await ensureRequestLogTable(sql)
  await ensurePartition(sql, dayOf(Date.now()))
  const [mine] = ACCOUNTS as [string]
  const tenant = uuid(2, 1)
  await seedRows(sql, mine, 50, '/api', { tenant, status: 404, code: 'not_found' })
  const { watched, statements: sent } = watchedClient(t, database.url, sql)
  // A sub-account's refusals: its index at once (row-search.ts).
  const page = await listRequests(watched, mine, { ...NO_FILTER, tenantId: tenant, status: { class: 4 }, limit: 5 })
  t.equal(page.records.length, 5, 'the page found its records')

  const replay = await sql.reserve()
  t.teardown(() => replay.release())
  const [own] = await replay<{ statement_timeout: string }[]>`show statement_timeout`
  const underShort: string[] = []
  for (const { statement, parameters } of sent) {
    const [now] = await replay<{ statement_timeout: string }[]>`show statement_timeout`
    if (now!.statement_timeout !== own!.statement_timeout) underShort.push(statement.replace(/\s+/g, ' ').trim())
    await replay.unsafe(statement, parameters as never[])
  }
  t.equal(underShort.length, 1, `one statement began under a short timeout:\n${underShort.join('\n')}`)
  t.match(underShort[0], /from request_log_rows/, 'the search')
})
