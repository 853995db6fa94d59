// Usage reconciliation (docs/billing.md), over real sockets to a real upstream and receiver, the
// real Postgres and Redis, on the real clock (the request log keeps real times): per sub-account and
// meter, the meter beside what limits charged, the request log's forwarded count and the export,
// every difference explained. Periods of a minute, a grace of a second: the test waits for one
// real close (a minute at most). Its name starts it early among the integration files, which tap
// runs in the order of their paths: started late, its wait for the clock would end the suite.
import t from 'tap'
import { mintKey } from '../../src/auth/mint.js'
import { createSubAccount } from '../../src/store/tenants.js'
import { UsageMeter } from '../../src/usage/meter.js'
import type { ReconciliationEntry } from '../../src/usage/reconciliation.js'
import { cli } from '../helpers/cli.js'
import { startGateway } from '../helpers/gateway.js'
import { checkProblem } from '../helpers/problems.js'
import { callAs } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import { logRecord, madeId } from '../helpers/request-records.js'
import { reportsTokens, startUpstream } from '../helpers/upstream.js'
import { startReceiver } from '../helpers/webhook-receiver.js'

const HOUR = 3_600_000
const MINUTE = 60_000
const iso = (ms: number) => `${new Date(ms).toISOString().slice(0, 19)}Z`
const SECRET = `whsec_${Buffer.alloc(32, 9).toString('base64')}`

const upstream = await startUpstream(t, reportsTokens)
// The receiver refuses until the test lets it acknowledge: what is closed is then not exported.
const receiver = await startReceiver(t, '/usage')
receiver.secret(SECRET)
let acknowledging = false
receiver.answer((_delivery, response) => void response.writeHead(acknowledging ? 200 : 503).end())

const gw = await startGateway(t, {
  usageFlushIntervalMs: 50,
  usagePeriods: { closeIntervalMs: 50, exportIntervalMs: 50 },
  // Written when the test says: the buffer of 16 records drops the oldest rows of a burst.
  requestLog: { flushIntervalMs: HOUR, bufferRecords: 16, rowRecords: 2 },
  env: {
    USAGE_PERIOD_SECONDS: '60',
    USAGE_CLOSE_GRACE_SECONDS: '1',
    USAGE_EXPORT_URL: receiver.url,
    USAGE_EXPORT_SECRET: SECRET,
    WEBHOOKS_RETRY_SCHEDULE: '100ms',
    ISSUER_URL: 'https://gateway.example',
  },
  gatewayConfig: {
    routes: [
      { prefix: '/llm', upstream: upstream.url, cost: 2, meters: [{ name: 'tokens', header: 'X-Tokens-Used' }] },
    ],
  },
})
const sql = gw.database.sql
const P = await gw.createParent({ name: 'P' })
const Q = await gw.createParent({ name: 'Q' })
const subAccount = async (parent: typeof P, name: string, limits?: unknown) => {
  const res = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name, ...(limits === undefined ? {} : { limits }) },
  })
  if (res.status !== 201) throw new Error(`${res.status} ${res.body}`)
  return JSON.parse(res.body).id as string
}
// A is under a rate it never reaches, C under one it does; B under none; D gets one midway.
const A = await subAccount(P, 'A', { rate: { requests: 1000, per_seconds: 60 } })
const B = await subAccount(P, 'B')
const C = await subAccount(P, 'C', { rate: { requests: 4, per_seconds: 3600 } })
const D = await subAccount(P, 'D')
const other = await createSubAccount(sql, Q.id, { name: 'other', externalId: null, metadata: {} })
const aKey = await mintKey(sql, { tenantId: A, name: 'a', scopes: [], withClientSecret: false })

const llm = (key: string, tokens: number, acting?: string) =>
  callAs(gw.url, key, { path: `/llm/x?tokens=${tokens}`, ...(acting === undefined ? {} : { acting }) })
const served = async (key: string, tokens: number, acting?: string) => {
  const res = await llm(key, tokens, acting)
  if (res.status !== 200) throw new Error(`${res.status} ${res.body}`)
  return res
}
const reconciliation = async (key: string, from: number, to: number) => {
  const res = await callAs(gw.url, key, {
    path: `/v1/sub-accounts/usage/reconciliation?from=${iso(from)}&to=${iso(to)}`,
  })
  if (res.status !== 200) throw new Error(`${res.status} ${res.body}`)
  return { closedUntil: res.headers['x-usage-closed-until'] as string | undefined, ...JSON.parse(res.body) }
}
type Entry = ReconciliationEntry
const entryOf = (data: Entry[], sub: string | null, meter: string) =>
  data.find((e) => e.sub_account_id === sub && e.meter === meter)
const kindsOf = (entry: Entry | undefined, against: string) =>
  Object.fromEntries((entry?.differences ?? []).filter((d) => d.against === against).map((d) => [d.kind, d.units]))

// The traffic starts in the first 40 s of a minute, so that it all falls in one or two periods.
await until(MINUTE, async () => Date.now() % MINUTE < 40_000, 200)
const FROM = Math.floor(Date.now() / MINUTE) * MINUTE
const TO = FROM + 5 * MINUTE

for (const tokens of [5, 7, 11]) await served(aKey.apiKey, tokens)
for (const tokens of [1, 2]) await served(P.apiKey, tokens, B)
await served(P.apiKey, 3) // the parent's own use
await served(P.apiKey, 4, C)
await served(P.apiKey, 4, C)
// C's third is refused: it counts nowhere. (No assertion before the subtests: tap would end.)
const refused = (await llm(P.apiKey, 4, C)).status
// D: two requests under no limit, then a limit, then requests under it (once the change is seen).
await served(P.apiKey, 1, D)
await served(P.apiKey, 1, D)
const patched = await callAs(gw.url, P.apiKey, {
  method: 'PATCH',
  path: `/v1/sub-accounts/${D}`,
  acting: 'self',
  json: { limits: { rate: { requests: 1000, per_seconds: 60 } } },
})
if (patched.status !== 200) throw new Error(`${patched.status} ${patched.body}`)
let dUnlimited = 4
const limitSeen = await until(10_000, async () => {
  const res = await served(P.apiKey, 1, D)
  if (res.headers['ratelimit-policy'] === undefined) dUnlimited += 2
  return res.headers['ratelimit-policy'] !== undefined
})
await served(P.apiKey, 1, D)
await served(Q.apiKey, 50, other.id)
await gw.app.requestLog!.flush()
// A burst of B's over the log's buffer: its oldest rows are dropped, their units counted apart.
const burst = 30
for (let i = 0; i < burst; i++) await served(P.apiKey, 10, B)
const dropped = gw.app.requestLog!.buffer.dropped
await gw.app.requestLog!.flush()
const LAST = Date.now()

t.test('open periods: the counts line up, and what is still open is said so', async (t) => {
  t.equal(refused, 429, "C's third was refused")
  t.ok(limitSeen, "D's limit was seen")
  t.ok(dropped > 0, `the log dropped ${dropped} records`)
  await gw.app.usageMeter.flush()
  const { data } = await reconciliation(P.apiKey, FROM, TO)
  t.notOk(
    data.some((e: Entry) => e.sub_account_id === other.id),
    "another parent's sub-account is not among the entries",
  )
  const a = entryOf(data, A, 'requests')
  t.match(a, { meter_units: 6, limiter_units: 6, log_units: 6 }, 'A: 3 requests at cost 2, charged and logged')
  t.same(kindsOf(a, 'export'), { open_period: 6 }, 'nothing of an open period is exported')
  t.same(kindsOf(a, 'limiter'), {}, "A's limiter agrees")
  t.match(
    entryOf(data, A, 'tokens'),
    { meter_units: 23, limiter_units: null, log_units: 23 },
    'tokens: no limit counts them',
  )
  t.match(
    entryOf(data, C, 'requests'),
    { meter_units: 4, limiter_units: 4, log_units: 4 },
    'the refused request counts nowhere',
  )
  t.match(
    entryOf(data, null, 'requests'),
    { meter_units: 2, limiter_units: null, log_units: 2 },
    "the parent's own use",
  )
  const d = entryOf(data, D, 'requests')
  t.same(kindsOf(d, 'limiter'), { not_limited: dUnlimited }, 'D: the requests before its limit are not limited')
  t.equal(d?.limiter_units, d!.meter_units - dUnlimited)
  for (const entry of data as Entry[])
    t.notOk(
      entry.differences.some((x) => x.kind === 'unexplained'),
      `nothing unexplained: ${JSON.stringify(entry)}`,
    )
})

t.test('a range of more sub-account meters than one answer holds: 400 naming the bound', async (t) => {
  // Each meter of each sub-account is a line of the answer: 10^5 of them ran a replica out of its
  // heap. Here the bound is 2, and P's range has more; a bound it fits answers as before.
  const { data } = await reconciliation(P.apiKey, FROM, TO)
  t.ok(data.length > 2, `P's range has ${data.length} lines`)
  for (const [most, status] of [
    [2, 400],
    [data.length, 200],
  ] as const) {
    const bounded = await startGateway(t, {
      database: gw.database,
      reconciliationMaxRows: most,
      usagePeriods: { closeIntervalMs: HOUR, exportIntervalMs: HOUR },
      requestLog: { flushIntervalMs: HOUR },
      env: { USAGE_PERIOD_SECONDS: '60', ISSUER_URL: 'https://gateway.example' },
    })
    const res = await callAs(bounded.url, P.apiKey, {
      path: `/v1/sub-accounts/usage/reconciliation?from=${iso(FROM)}&to=${iso(TO)}`,
    })
    if (status === 400) {
      checkProblem(t, res, 400, 'validation_failed', 'past the bound')
      t.match(res.body, /more than 2 sub-account meters, the most one reconciliation answers: shorten it/)
    } else t.equal(res.status, 200, `at most ${most}: answered`)
    await bounded.close()
  }
})

t.test('closed: the export acknowledged, the log short by its dropped records only', async (t) => {
  const lastPeriodEnd = Math.floor(LAST / MINUTE) * MINUTE + MINUTE
  // Waits for the real close: the end of the last period with traffic, plus the grace.
  t.ok(
    await until(
      2 * MINUTE,
      async () => {
        const { closedUntil } = await reconciliation(P.apiKey, FROM, TO)
        return closedUntil !== undefined && Date.parse(closedUntil) >= lastPeriodEnd
      },
      200,
    ),
    'closed',
  )
  const closed = await reconciliation(P.apiKey, FROM, lastPeriodEnd)
  for (const entry of closed.data as Entry[]) {
    t.same(kindsOf(entry, 'export'), { not_exported: entry.meter_units }, 'closed, not acknowledged yet')
    t.equal(entry.exported_units, 0)
  }
  acknowledging = true
  t.ok(
    await until(30_000, async () => {
      const { data } = await reconciliation(P.apiKey, FROM, lastPeriodEnd)
      return (data as Entry[]).every((e) => e.exported_units === e.meter_units)
    }),
    'acknowledged: exported equals the meter',
  )
  const { data } = await reconciliation(P.apiKey, FROM, lastPeriodEnd)
  const b = entryOf(data, B, 'requests')
  t.equal(b?.meter_units, (2 + burst) * 2)
  const bLog = kindsOf(b, 'log')
  t.ok((bLog.log_dropped ?? 0) > 0, `B's log is short by its dropped records: ${JSON.stringify(b)}`)
  t.equal(b!.log_units! + bLog.log_dropped!, b!.meter_units, 'and by nothing else')
  t.same(
    kindsOf(entryOf(data, B, 'tokens'), 'log'),
    { log_dropped: (bLog.log_dropped ?? 0) * 5 },
    'tokens dropped with them',
  )
  for (const entry of data as Entry[]) {
    t.same(kindsOf(entry, 'export'), {}, `exported whole: ${entry.sub_account_id} ${entry.meter}`)
    t.notOk(entry.differences.some((x) => x.kind === 'unexplained' || x.kind === 'open_period'))
  }
})

t.test('late units: billed in the first open period, served in the closed one', async (t) => {
  // A replica cut off since the first period flushes its count now, with the log's record of it.
  const late = new UsageMeter({ sql, log: gw.app.log, periodSeconds: 60, now: () => FROM + 1_000 })
  late.record(A, 200, true, aKey.row.id, 2, null, true)
  await late.flush()
  gw.app.requestLog!.add(
    logRecord({
      id: madeId(1),
      path: '/llm/x',
      accountId: P.id,
      tenantId: A,
      keyId: aKey.row.id,
      timeMs: FROM,
      durationMs: 1_000,
      cost: 2,
    }),
  )
  await gw.app.requestLog!.flush()
  const closedOnly = await reconciliation(P.apiKey, FROM, FROM + MINUTE)
  const a = entryOf(closedOnly.data, A, 'requests')
  t.same(kindsOf(a, 'log'), { late: -2 }, 'the closed period: served and logged, billed later')
  t.same(kindsOf(a, 'limiter'), { late: -2 })
  const whole = await reconciliation(P.apiKey, FROM, TO)
  const all = entryOf(whole.data, A, 'requests')
  t.same(kindsOf(all, 'log'), { late: -2, open_period: 2 }, 'the whole range: the open period holds it')
  t.notOk(all?.differences.some((x) => x.kind === 'unexplained'))
})

t.test('bad ranges are refused naming the field; another parent sees its own only', async (t) => {
  const crooked = await callAs(gw.url, P.apiKey, {
    path: `/v1/sub-accounts/usage/reconciliation?from=${iso(FROM + 1_000)}`,
  })
  t.equal(crooked.status, 400)
  t.match(JSON.parse(crooked.body), { code: 'validation_failed', errors: [{ path: '/querystring/from' }] })
  // Never rounded, past the millisecond either: `.0009Z` after a period start is not it.
  for (const [name, query] of [
    ['from', `from=${iso(FROM).replace('Z', '.0009Z')}&to=${iso(TO)}`],
    ['to', `from=${iso(FROM)}&to=${iso(TO).replace('Z', '.000000001Z')}`],
  ] as const) {
    const res = await callAs(gw.url, P.apiKey, { path: `/v1/sub-accounts/usage/reconciliation?${query}` })
    t.equal(res.status, 400, `${query}: ${res.body.slice(0, 200)}`)
    t.match(JSON.parse(res.body), {
      code: 'validation_failed',
      errors: [{ path: `/querystring/${name}`, message: /must be at the start of a usage period/ }],
    })
  }
  const zeros = await callAs(gw.url, P.apiKey, {
    path: `/v1/sub-accounts/usage/reconciliation?from=${iso(FROM).replace('Z', '.000000Z')}&to=${iso(TO)}`,
  })
  t.equal(zeros.status, 200, 'a fraction of zeros is the period start itself')
  const inverted = await callAs(gw.url, P.apiKey, {
    path: `/v1/sub-accounts/usage/reconciliation?from=${iso(TO)}&to=${iso(FROM)}`,
  })
  t.equal(inverted.status, 400)
  const unknown = await callAs(gw.url, P.apiKey, { path: '/v1/sub-accounts/usage/reconciliation?format=csv' })
  t.equal(unknown.status, 400)
  const q = await reconciliation(Q.apiKey, FROM, TO)
  t.same((q.data as Entry[]).map((e) => `${e.sub_account_id} ${e.meter}`).sort(), [
    `${other.id} requests`,
    `${other.id} tokens`,
  ])
})

t.test('the CLI reconciles every account, or one', async (t) => {
  const operator = cli({
    DATABASE_URL: gw.database.url,
    USAGE_PERIOD_SECONDS: '60',
    USAGE_EXPORT_URL: receiver.url,
    USAGE_EXPORT_SECRET: SECRET,
  })
  const entries = (stdout: string) =>
    stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { account_id: string })
  const every = await operator.run(['usage', 'reconcile', '--from', iso(FROM), '--to', iso(TO)])
  t.equal(every.code, 0, every.stderr)
  t.ok(
    entries(every.stdout).some((e) => e.account_id === P.id),
    "P's entries",
  )
  t.ok(
    entries(every.stdout).some((e) => e.account_id === Q.id),
    "and Q's",
  )
  const one = await operator.run(['usage', 'reconcile', '--from', iso(FROM), '--to', iso(TO), '--account', Q.id])
  t.equal(one.code, 0, one.stderr)
  t.ok(
    entries(one.stdout).every((e) => e.account_id === Q.id),
    'one account only',
  )
  await operator.fails(t, ['usage', 'reconcile', '--from', 'yesterday'], /--from/)
})
