// The usage export, pulled (docs/billing.md), over real sockets to a real upstream and the real
// Postgres: periods close behind every live replica's flush mark plus the grace; the export
// streams the closed periods' units of the parent's account only, as CloudEvents the `cloudevents`
// SDK reads or as CSV, cut where the closed periods end; units flushed for a closed period count in
// the first open one, marked late; the CLI exports every account. The gateway's usage clock is the
// test's (periods of a minute), and its meter flushes and closes only when the test says.
import type { ServerResponse } from 'node:http'
import { HTTP } from 'cloudevents'
import t from 'tap'
import { mintKey } from '../../src/auth/mint.js'
import { createSubAccount } from '../../src/store/tenants.js'
import { closePeriods, exportRows } from '../../src/store/usage-periods.js'
import { UsageMeter } from '../../src/usage/meter.js'
import { checkPeriodLength } from '../../src/usage/period-close.js'
import { cli } from '../helpers/cli.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'

const HOUR = 3_600_000
const MINUTE = 60_000
const iso = (ms: number) => `${new Date(ms).toISOString().slice(0, 19)}Z`

/** `?tokens=` comes back in X-Tokens-Used. */
function answer(url: string, response: ServerResponse): void {
  const tokens = new URLSearchParams(url.split('?')[1] ?? '').get('tokens')
  response.writeHead(200, { 'content-type': 'text/plain', ...(tokens === null ? {} : { 'x-tokens-used': tokens }) })
  response.end('done')
}

const upstream = await startUpstream(t, (request, response) => answer(request.url!, response))
// Ten minutes ago, at a minute's start: the usage clock moves only when the test moves it.
const T0 = Math.floor(Date.now() / MINUTE) * MINUTE - 10 * MINUTE
let clock = T0 + 10_000
const env = { USAGE_PERIOD_SECONDS: '60', USAGE_CLOSE_GRACE_SECONDS: '5', ISSUER_URL: 'https://gateway.example' }
const gw = await startGateway(t, {
  usageFlushIntervalMs: HOUR,
  usagePeriods: { clock: () => clock, closeIntervalMs: HOUR },
  env,
  gatewayConfig: {
    routes: [
      { prefix: '/llm', upstream: upstream.url, cost: 2, meters: [{ name: 'tokens', header: 'X-Tokens-Used' }] },
    ],
  },
})
const sql = gw.database.sql
const P = await gw.createParent({ name: 'P' })
const Q = await gw.createParent({ name: 'Q' })
// An external id a CSV must quote.
const A = await createSubAccount(sql, P.id, { name: 'A', externalId: 'a,"1"', metadata: {} })
const B = await createSubAccount(sql, P.id, { name: 'B', externalId: null, metadata: {} })
const C = await createSubAccount(sql, Q.id, { name: 'C', externalId: 'c', metadata: {} })
const aKey = await mintKey(sql, { tenantId: A.id, name: 'a', scopes: [], withClientSecret: false })

const llm = async (key: string, tokens: number, acting?: string) => {
  const res = await callAs(gw.url, key, {
    path: `/llm/x?tokens=${tokens}`,
    ...(acting === undefined ? {} : { acting }),
  })
  if (res.status !== 200) throw new Error(`${res.status} ${res.body}`)
}
const exportOf = (key: string, query: string) => callAs(gw.url, key, { path: `/v1/sub-accounts/usage/export?${query}` })
const lines = (body: string) => body.split('\n').filter((line) => line !== '')
/** Flushes at the usage clock's `at`, then closes; returns where the closed periods end. */
const flushAndClose = async (at: number) => {
  clock = at
  await gw.app.usageMeter.flush()
  return gw.app.usagePeriods.close()
}

await llm(aKey.apiKey, 5)
await llm(aKey.apiKey, 7)
await llm(P.apiKey, 11, A.id)
await llm(P.apiKey, 4, B.id)
await llm(P.apiKey, 1) // the parent's own use
await llm(Q.apiKey, 100, C.id)

t.test('a period stays open until every replica has flushed past its end and the grace', async (t) => {
  // Flushed 10 s into the period: nothing of it is closed, only what came before.
  t.same(await flushAndClose(T0 + 10_000), new Date(T0), 'closed until the period under way')
  const early = await exportOf(P.apiKey, `from=${iso(T0)}&to=${iso(T0 + 2 * MINUTE)}`)
  t.equal(early.status, 200)
  t.equal(early.body, '', 'no record of an open period')
  t.equal(early.headers['x-usage-closed-until'], iso(T0), 'the cut named')
  // Past the end, within the grace (5 s): still open.
  t.same(await flushAndClose(T0 + MINUTE + 4_000), new Date(T0), 'within the grace')
  t.same(await flushAndClose(T0 + MINUTE + 5_000), new Date(T0 + MINUTE), 'closed once past its end and the grace')
})

t.test('ndjson: a CloudEvent per tenant and meter of the parent, that the SDK reads', async (t) => {
  const res = await exportOf(P.apiKey, `from=${iso(T0 - MINUTE)}&to=${iso(T0 + 5 * MINUTE)}`)
  t.equal(res.status, 200)
  t.match(res.headers['content-type'], /^application\/x-ndjson/)
  t.equal(res.headers['x-usage-closed-until'], iso(T0 + MINUTE), 'cut where the closed periods end')
  const events = lines(res.body).map((line) =>
    HTTP.toEvent({ headers: { 'content-type': 'application/cloudevents+json' }, body: line }),
  )
  const records = events.map((e) => {
    const event = Array.isArray(e) ? e[0]! : e
    return { id: event.id, subject: event.subject, data: event.data as Record<string, unknown> }
  })
  const start = iso(T0)
  const expect = (sub: string | null, external: string | null, meter: string, units: number, requests: number) => ({
    id: `${P.id}:${sub ?? P.id}:${meter}:${start}`,
    subject: sub ?? P.id,
    data: {
      account_id: P.id,
      sub_account_id: sub,
      external_id: external,
      meter,
      units,
      requests,
      period_start: start,
      period_end: iso(T0 + MINUTE),
      late: false,
    },
  })
  // The parent's own use first, then its sub-accounts by id; Q's sub-account not at all.
  const [first, second] = [A.id, B.id].sort()
  const bySub = {
    [A.id]: [expect(A.id, 'a,"1"', 'requests', 6, 3), expect(A.id, 'a,"1"', 'tokens', 23, 3)],
    [B.id]: [expect(B.id, null, 'requests', 2, 1), expect(B.id, null, 'tokens', 4, 1)],
  }
  t.same(records, [
    expect(null, null, 'requests', 2, 1),
    expect(null, null, 'tokens', 1, 1),
    ...bySub[first!]!,
    ...bySub[second!]!,
  ])
  const raw = JSON.parse(lines(res.body)[0]!)
  t.match(raw, {
    specversion: '1.0',
    type: 'com.tenancy-gateway.usage',
    source: 'https://gateway.example',
    time: start,
  })

  const again = await exportOf(P.apiKey, `from=${iso(T0 - MINUTE)}&to=${iso(T0 + 5 * MINUTE)}`)
  t.equal(again.body, res.body, 'the same records, ids and all, when exported again')
  const q = await exportOf(Q.apiKey, `from=${iso(T0)}&to=${iso(T0 + MINUTE)}`)
  t.same(
    lines(q.body).map((line) => JSON.parse(line).data.units),
    [2, 100],
    "Q's export holds C's, not P's",
  )
})

t.test('csv: a header row, the data fields, quoted where they must be', async (t) => {
  const res = await exportOf(P.apiKey, `from=${iso(T0)}&to=${iso(T0 + MINUTE)}&format=csv`)
  t.equal(res.status, 200)
  t.match(res.headers['content-type'], /^text\/csv/)
  const rows = res.body.split('\r\n')
  t.equal(rows[0], 'account_id,sub_account_id,external_id,meter,units,requests,period_start,period_end,late')
  t.equal(rows.length, 1 + 6 + 1, 'a row per record, each ending in CRLF')
  t.ok(
    rows.includes(`${P.id},${A.id},"a,""1""",tokens,23,3,${iso(T0)},${iso(T0 + MINUTE)},false`),
    'the external id quoted, its quotes doubled',
  )
  t.ok(rows.includes(`${P.id},,,requests,2,1,${iso(T0)},${iso(T0 + MINUTE)},false`), 'nulls as empty fields')
})

t.test('units flushed for a closed period count in the first open one, marked late', async (t) => {
  // A replica cut off from Postgres since 20 s into the first period flushes now.
  const late = new UsageMeter({ sql, log: gw.app.log, periodSeconds: 60, now: () => T0 + 20_000 })
  late.record(A.id, 200, true, aKey.row.id, 2, new Map([['tokens', 50]]))
  await late.close()
  await llm(aKey.apiKey, 3)
  t.same(await flushAndClose(T0 + 2 * MINUTE + 5_000), new Date(T0 + 2 * MINUTE))
  const res = await exportOf(P.apiKey, `from=${iso(T0)}&to=${iso(T0 + 2 * MINUTE)}`)
  const records = lines(res.body).map((line) => JSON.parse(line).data)
  t.same(
    records
      .filter((r) => r.sub_account_id === A.id && r.meter === 'tokens')
      .map((r) => [r.period_start, r.units, r.late]),
    [
      [iso(T0), 23, false],
      [iso(T0 + MINUTE), 53, true],
    ],
    'the closed period unchanged; its late units in the next, with what that one counted',
  )
})

t.test("a replica not seen for 120 s is not waited for; a live one's mark is", async (t) => {
  await sql`insert into usage_flush_marks (replica_id, flushed_through, seen_at)
            values ('00000000-0000-4000-8000-000000000001', ${new Date(T0)}, now() - interval '121 seconds')`
  t.same(await flushAndClose(T0 + 3 * MINUTE + 5_000), new Date(T0 + 3 * MINUTE), 'the gone replica holds nothing')
  await sql`insert into usage_flush_marks (replica_id, flushed_through)
            values ('00000000-0000-4000-8000-000000000002', ${new Date(T0 + 3 * MINUTE + 30_000)})`
  t.same(await flushAndClose(T0 + 5 * MINUTE), new Date(T0 + 3 * MINUTE), 'a live replica behind holds the close')
  await sql`delete from usage_flush_marks where replica_id = '00000000-0000-4000-8000-000000000002'`
})

t.test('a close waits for a flush under way', async (t) => {
  clock = T0 + 4 * MINUTE + 5_000
  await llm(aKey.apiKey, 1)
  await gw.app.usageMeter.flush()
  await llm(aKey.apiKey, 1)
  // Another transaction holds a row the next flush adds to: the flush stops there, after it took
  // the close row FOR SHARE, which it keeps to its commit.
  const reserved = await sql.reserve()
  t.teardown(() => reserved.release())
  await reserved`begin`
  await reserved`select units from usage_period_units
                 where tenant_id = ${A.id} and period_start = ${new Date(T0 + 4 * MINUTE)} and meter = 'requests' for update`
  const waitingOn = async (text: string) =>
    until(30_000, async () => {
      const [row] = await sql<{ waiting: number }[]>`
        select count(*)::int as waiting from pg_stat_activity
        where wait_event_type = 'Lock' and position(${text} in query) > 0`
      return row!.waiting > 0
    })
  const flushing = gw.app.usageMeter.flush()
  t.ok(await waitingOn('insert into usage_batches'), 'the flush waits on the row')
  const closing = gw.app.usagePeriods.close()
  t.ok(await waitingOn('update usage_close'), 'the close waits for the flush')
  await reserved`commit`
  t.same(await closing, new Date(T0 + 4 * MINUTE), 'then closes')
  // The close committed after the flush did (the promises may settle in either order: the flush
  // goes on to write keys' last use): its units are in by then.
  const [row] = await sql<{ units: string }[]>`
    select units::text from usage_period_units
    where tenant_id = ${A.id} and period_start = ${new Date(T0 + 4 * MINUTE)} and meter = 'requests'`
  t.equal(row!.units, '4', "both requests' units are in when the close is")
  await flushing
})

t.test('bad ranges: a 400 that names the field and says what to send', async (t) => {
  const cases: [string, RegExp][] = [
    [`from=${iso(T0 + 20 * MINUTE)}`, /\/querystring\/from must be before to/],
    [`from=${iso(T0)}&to=yesterday`, /\/querystring\/to must be an RFC 3339 date-time/],
    [
      `from=${iso(T0 + 30_000)}&to=${iso(T0 + MINUTE)}`,
      new RegExp(
        `/querystring/from must be at the start of a usage period \\(every 60 s from midnight UTC\\), such as ${iso(T0)}`,
      ),
    ],
    [`from=${iso(T0)}&to=${iso(T0)}`, /\/querystring\/from must be before to/],
  ]
  // Never rounded, past the millisecond either: a fraction that is not all zeros is no period start.
  const notStart = (name: string) =>
    new RegExp(`/querystring/${name} must be at the start of a usage period .*, such as ${iso(T0)}`)
  for (const fraction of ['.0009', '.000000001', '.001']) {
    cases.push([`from=${iso(T0).replace('Z', `${fraction}Z`)}&to=${iso(T0 + MINUTE)}`, notStart('from')])
    cases.push([`from=${iso(T0 - MINUTE)}&to=${iso(T0).replace('Z', `${fraction}Z`)}`, notStart('to')])
  }
  for (const [query, detail] of cases) {
    const res = await exportOf(P.apiKey, query)
    t.equal(res.status, 400, query)
    t.equal(res.json().code, 'validation_failed')
    t.match(res.json().detail, detail, query)
  }
  const zeros = await exportOf(P.apiKey, `from=${iso(T0).replace('Z', '.000000000Z')}&to=${iso(T0 + MINUTE)}`)
  t.equal(zeros.status, 200, 'a fraction of zeros is the period start itself')
  const plain = await exportOf(P.apiKey, '')
  t.equal(plain.status, 200, 'no query: this month, as far as it is closed')
  t.equal(plain.headers['x-usage-closed-until'], iso(T0 + 4 * MINUTE))
  const format = await exportOf(P.apiKey, `from=${iso(T0)}&to=${iso(T0 + MINUTE)}&format=xml`)
  t.equal(format.status, 400)
  t.match(format.json().detail, /format/)
  const sub = await exportOf(aKey.apiKey, `from=${iso(T0)}&to=${iso(T0 + MINUTE)}`)
  t.equal(sub.status, 403, "a sub-account's key exports nothing")
})

t.test('the CLI exports every account, or one', async (t) => {
  const operator = cli({ DATABASE_URL: gw.database.url, ...env })
  const firstMinute = ['usage', 'export', '--from', iso(T0), '--to', iso(T0 + MINUTE)]
  const all = await operator.run(firstMinute)
  t.equal(all.code, 0, all.stderr)
  const accounts = new Set(lines(all.stdout).map((line) => JSON.parse(line).data.account_id))
  t.same([...accounts].sort(), [P.id, Q.id].sort(), 'both parents')
  t.match(all.stderr, `closed until ${iso(T0 + 4 * MINUTE)}`)
  t.notMatch(all.stderr, /warning/, 'ISSUER_URL set: no warning')
  const unnamed = await cli({ DATABASE_URL: gw.database.url, USAGE_PERIOD_SECONDS: '60' }).run(firstMinute)
  t.match(unnamed.stderr, /^warning: ISSUER_URL is not set, so the records' source is http:\/\/localhost:/)
  const route = await exportOf(Q.apiKey, `from=${iso(T0)}&to=${iso(T0 + MINUTE)}&format=csv`)
  const one = await operator.run([...firstMinute, '--account', Q.id, '--format', 'csv'])
  t.equal(one.stdout, route.body, "one account's, as its parent pulls it")
  await operator.fails(
    t,
    ['usage', 'export', '--from', iso(T0 + 1_000), '--to', iso(T0 + MINUTE)],
    /^error: --from must be at the start of a usage period/,
  )
  await operator.fails(
    t,
    ['usage', 'export', '--from', iso(T0).replace('Z', '.0009Z'), '--to', iso(T0 + MINUTE)],
    /^error: --from must be at the start of a usage period/,
  )
  await operator.fails(t, ['usage', 'export', '--to', 'soon'], /^error: --to must be an RFC 3339 date-time/)
  await operator.fails(t, [...firstMinute, '--format', 'xml'], /--format must be ndjson or csv/)
  await operator.fails(t, [...firstMinute, '--account', A.id], /no parent account/)
})

t.test('pages follow each other without a gap or a repeat, whatever their size', async (t) => {
  const read = async (pageSize: number) => {
    const rows: unknown[] = []
    const range = { from: new Date(T0 - MINUTE), to: new Date(T0 + 4 * MINUTE), accountId: null }
    for await (const page of exportRows(sql, range, pageSize)) rows.push(...page)
    return rows
  }
  const whole = await read(500)
  t.ok(whole.length >= 10, `${whole.length} records`)
  for (const size of [1, 2, 3, 7]) t.same(await read(size), whole, `pages of ${size}`)
})

t.test('a HEAD says where the closed periods end, and sends no record', async (t) => {
  const res = await callAs(gw.url, P.apiKey, {
    method: 'HEAD',
    path: `/v1/sub-accounts/usage/export?from=${iso(T0)}&to=${iso(T0 + 5 * MINUTE)}`,
  })
  t.equal(res.status, 200)
  t.equal(res.headers['x-usage-closed-until'], iso(T0 + 4 * MINUTE))
  t.equal(res.body, '')
})

t.test(
  "a closed period's record keeps the external_id of its close; a rename changes only later periods",
  async (t) => {
    const closed = `from=${iso(T0)}&to=${iso(T0 + MINUTE)}`
    const before = {
      ndjson: await exportOf(P.apiKey, closed),
      csv: await exportOf(P.apiKey, `${closed}&format=csv`),
    }
    t.match(before.csv.body, /"a,""1"""/, 'the external_id of the close')
    const renamed = await gw.call(P.apiKey, {
      method: 'PATCH',
      url: `/v1/sub-accounts/${A.id}`,
      acting: 'self',
      body: { external_id: 'a-renamed' },
    })
    t.equal(renamed.statusCode, 200, renamed.body)
    t.equal(renamed.json().external_id, 'a-renamed')
    const after = {
      ndjson: await exportOf(P.apiKey, closed),
      csv: await exportOf(P.apiKey, `${closed}&format=csv`),
    }
    t.equal(after.ndjson.body, before.ndjson.body, 'the pulled CloudEvents, byte for byte')
    t.equal(after.csv.body, before.csv.body, 'the pulled CSV, byte for byte')
    const rows = []
    for await (const page of exportRows(sql, { from: new Date(T0), to: new Date(T0 + MINUTE), accountId: P.id }))
      rows.push(...page)
    t.ok(
      rows.filter((row) => row.sub_account_id === A.id).every((row) => row.external_id === 'a,"1"'),
      'what the push reads too',
    )

    // A period still open at the rename closes with the new one.
    clock = T0 + 4 * MINUTE + 20_000
    await llm(aKey.apiKey, 3)
    t.same(await flushAndClose(T0 + 5 * MINUTE + 5_000), new Date(T0 + 5 * MINUTE))
    const later = await exportOf(P.apiKey, `from=${iso(T0 + 4 * MINUTE)}&to=${iso(T0 + 5 * MINUTE)}`)
    const externals = lines(later.body)
      .map((line) => JSON.parse(line).data)
      .filter((data) => data.sub_account_id === A.id)
      .map((data) => data.external_id)
    t.ok(externals.length > 0 && externals.every((id) => id === 'a-renamed'), `the later period's: ${externals}`)
  },
)

t.test('another period length than the closed periods is refused at the start, and closes nothing', async (t) => {
  await t.rejects(checkPeriodLength(sql, 3600), {
    message:
      /^invalid configuration: USAGE_PERIOD_SECONDS is 3600, but this database's usage periods are 60 s long and some have closed .*set it back to 60, or use a new database$/,
  })
  await t.resolves(checkPeriodLength(sql, 60), 'the same length passes')
  await cli({ DATABASE_URL: gw.database.url, ...env, USAGE_PERIOD_SECONDS: '3600' }).fails(
    t,
    ['usage', 'export'],
    /^error: invalid configuration: USAGE_PERIOD_SECONDS is 3600, but this database's usage periods are 60 s long/,
  )
  const [before] = await sql<{ closed_until: Date }[]>`select closed_until from usage_close`
  // Every replica two hours on: a closer of an hour would close up to an hour boundary past the close.
  clock = T0 + 2 * HOUR
  await gw.app.usageMeter.flush()
  t.same(
    await closePeriods(sql, { periodSeconds: 3600, graceSeconds: 1 }),
    before!.closed_until,
    'a closer of another length moves nothing',
  )
  const [row] = await sql<{ period_seconds: number }[]>`select period_seconds from usage_close`
  t.equal(row!.period_seconds, 60, 'the periods as they were')
})

t.test('a replica that stops takes its mark with it', async (t) => {
  const id = gw.app.usageMeter.replicaId
  const [before] = await sql<{ n: number }[]>`select count(*)::int as n from usage_flush_marks where replica_id = ${id}`
  t.equal(before!.n, 1, 'marked while it runs')
  await gw.close()
  const [after] = await sql<{ n: number }[]>`select count(*)::int as n from usage_flush_marks where replica_id = ${id}`
  t.equal(after!.n, 0, 'gone once its last counts are in')
})
