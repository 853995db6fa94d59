// The usage export's push (docs/billing.md, Pushing the export), from two replicas of one
// deployment to a real receiver on loopback: the closed periods' records arrive in signed batches
// that `standardwebhooks` verifies and the `cloudevents` SDK reads, from one replica at a time;
// a receiver that fails gets them again on the retry schedule, a lost acknowledgement sends the
// same batch (same ids) again, a replica that stops hands over to the other, and a receiver that
// dedupes by id ends with exactly what Postgres counted. The usage clock is the test's.
import { HTTP } from 'cloudevents'
import t from 'tap'
import { mintKey } from '../../src/auth/mint.js'
import { createSubAccount } from '../../src/store/tenants.js'
import { metricValue, startReplicas } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import { reportsTokens, startUpstream } from '../helpers/upstream.js'
import { startReceiver } from '../helpers/webhook-receiver.js'

const HOUR = 3_600_000
const MINUTE = 60_000
const SECRET = `whsec_${Buffer.alloc(32, 7).toString('base64')}`

const upstream = await startUpstream(t, reportsTokens)
const receiver = await startReceiver(t, '/usage')
receiver.secret(SECRET)
/** What the receiver keeps: each event by id, as the SDK read it. */
const received = new Map<string, { subject: string; meter: string; units: number; period: string }>()
let inFlight = 0
let mostInFlight = 0
const store = (body: string, contentType: string) => {
  const events = HTTP.toEvent({ headers: { 'content-type': contentType }, body })
  for (const event of [events].flat()) {
    const data = event.data as { meter: string; units: number; period_start: string }
    received.set(event.id, { subject: event.subject!, meter: data.meter, units: data.units, period: data.period_start })
  }
}
receiver.answer((delivery, response) => {
  if (delivery.verified === null) return void response.writeHead(401).end('bad signature')
  store(delivery.body, String(delivery.headers['content-type']))
  response.writeHead(200).end('ok')
})

const T0 = Math.floor(Date.now() / MINUTE) * MINUTE - 30 * MINUTE
let clock = T0 + 1_000
const [one, two] = await startReplicas(t, 2, {
  usageFlushIntervalMs: HOUR,
  usagePeriods: { clock: () => clock, closeIntervalMs: HOUR, exportIntervalMs: 50, exportLeaseSeconds: 3 },
  env: {
    USAGE_PERIOD_SECONDS: '60',
    USAGE_CLOSE_GRACE_SECONDS: '1',
    USAGE_EXPORT_URL: receiver.url,
    USAGE_EXPORT_SECRET: SECRET,
    WEBHOOKS_RETRY_SCHEDULE: '100ms,200ms',
    ISSUER_URL: 'https://gateway.example',
  },
  gatewayConfig: {
    routes: [
      { prefix: '/llm', upstream: upstream.url, cost: 2, meters: [{ name: 'tokens', header: 'X-Tokens-Used' }] },
    ],
  },
})
const replicas = [one!, two!]
const sql = one!.database.sql
const P = await one!.createParent({ name: 'P' })
const A = await createSubAccount(sql, P.id, { name: 'A', externalId: 'a', metadata: {} })
const B = await createSubAccount(sql, P.id, { name: 'B', externalId: 'b', metadata: {} })
const aKey = await mintKey(sql, { tenantId: A.id, name: 'a', scopes: [], withClientSecret: false })

let served = 0
/** `n` requests over both replicas, for A and B in turn. */
const traffic = async (n: number) => {
  for (let i = 0; i < n; i++) {
    const gw = replicas[i % replicas.length]!
    const res = await callAs(gw.url, i % 2 === 0 ? aKey.apiKey : P.apiKey, {
      path: `/llm/x?tokens=${i + 1}`,
      ...(i % 2 === 0 ? {} : { acting: B.id }),
    })
    if (res.status !== 200) throw new Error(`${res.status} ${res.body}`)
    served++
  }
}
/** Both replicas flush at the usage clock's `at`; then periods close. */
const closeAt = async (at: number) => {
  clock = at
  for (const gw of replicas) if (gw.app.server.listening) await gw.app.usageMeter.flush()
  return replicas.find((gw) => gw.app.server.listening)!.app.usagePeriods.close()
}
/** What Postgres holds of the closed periods, by subject, meter and period. */
const closedTotals = async () => {
  const rows = await sql<{ key: string; units: string }[]>`
    select u.tenant_id || ' ' || u.meter || ' ' || to_char(u.period_start at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as key,
           u.units::text as units
    from usage_period_units u where u.period_start < (select closed_until from usage_close)`
  return new Map(rows.map((r) => [r.key, Number(r.units)]))
}
const receivedTotals = () => {
  const totals = new Map<string, number>()
  for (const e of received.values()) {
    const key = `${e.subject} ${e.meter} ${e.period}`
    totals.set(key, (totals.get(key) ?? 0) + e.units)
  }
  return totals
}
const caughtUp = async () => {
  const want = await closedTotals()
  const ok = await until(60_000, async () => {
    const got = receivedTotals()
    return got.size === want.size && [...want].every(([k, v]) => got.get(k) === v)
  })
  return { ok, want: Object.fromEntries(want), got: Object.fromEntries(receivedTotals()) }
}

t.test('closed periods arrive signed, as CloudEvent batches, from one replica at a time', async (t) => {
  receiver.answer((delivery, response) => {
    inFlight++
    mostInFlight = Math.max(mostInFlight, inFlight)
    setImmediate(() => {
      inFlight--
      if (delivery.verified === null) return void response.writeHead(401).end('bad signature')
      store(delivery.body, String(delivery.headers['content-type']))
      response.writeHead(200).end('ok')
    })
  })
  await traffic(20)
  t.same(await closeAt(T0 + MINUTE + 1_000), new Date(T0 + MINUTE))
  const { ok, want, got } = await caughtUp()
  t.ok(ok, `the receiver has what Postgres counted: ${JSON.stringify({ want, got })}`)
  t.equal(Object.keys(want).length, 4, 'A and B, requests and tokens')
  t.ok(receiver.deliveries.length > 0)
  for (const delivery of receiver.deliveries) {
    t.not(delivery.verified, null, 'signed with USAGE_EXPORT_SECRET')
    t.equal(delivery.headers['content-type'], 'application/cloudevents-batch+json')
    t.match(delivery.id, /^usage_[A-Za-z0-9_-]{32}$/)
  }
  const first = JSON.parse(receiver.deliveries[0]!.body)[0]
  t.match(first, { specversion: '1.0', type: 'com.tenancy-gateway.usage', source: 'https://gateway.example' })
  t.equal(mostInFlight, 1, 'never two batches at once')
  t.ok(
    await until(30_000, async () => (await metricValue(one!.app, 'tgw_usage_export_lag_seconds')) === 0),
    'no lag once acknowledged',
  )
})

t.test('a receiver that fails gets the records again on the schedule; a lost answer resends the batch', async (t) => {
  const before = receiver.deliveries.length
  let failures = 0
  receiver.answer((delivery, response) => {
    // The first three attempts fail: two refused, then one taken whose answer is lost.
    failures++
    if (failures <= 2) return void response.writeHead(503).end('down')
    if (delivery.verified !== null) store(delivery.body, String(delivery.headers['content-type']))
    if (failures === 3) return void response.destroy()
    response.writeHead(200).end('ok')
  })
  await traffic(10)
  await closeAt(T0 + 2 * MINUTE + 1_000)
  t.ok(
    await until(30_000, async () => {
      const [row] = await sql<{ attempts: number }[]>`select attempts from usage_export_cursors`
      return row!.attempts > 0
    }),
    'the failed attempts are counted',
  )
  t.ok(
    await until(30_000, async () => (await metricValue(one!.app, 'tgw_usage_export_lag_seconds')) > 0),
    'the lag shows while the receiver fails',
  )
  const { ok, want, got } = await caughtUp()
  t.ok(ok, `the receiver, deduplicating by id, has exactly what was counted: ${JSON.stringify({ want, got })}`)
  t.ok(await until(30_000, async () => receiver.deliveries.length - before >= 4), 'a fourth attempt, acknowledged')
  const ids = receiver.deliveries.slice(before).map((d) => d.id)
  t.equal(new Set(ids).size, 1, 'every attempt of the one batch under one webhook-id')
  receiver.answer((delivery, response) => {
    if (delivery.verified !== null) store(delivery.body, String(delivery.headers['content-type']))
    response.writeHead(200).end('ok')
  })
})

t.test('a replica that died holding the lease holds the push until its lease runs out', async (t) => {
  const [lease] = await sql<{ until: Date }[]>`
    update usage_export_cursors set holder = '00000000-0000-4000-8000-00000000dead', lease_until = now() + interval '2 seconds'
    returning lease_until as until`
  const before = receiver.deliveries.length
  await traffic(4)
  await closeAt(T0 + 2 * MINUTE + 30_000)
  await closeAt(T0 + 3 * MINUTE + 1_000)
  const { ok } = await caughtUp()
  t.ok(ok, 'taken over and sent')
  const sent = receiver.deliveries.slice(before)
  t.ok(sent.length > 0)
  t.ok(
    sent.every((d) => d.receivedAt >= lease!.until.getTime() - 50),
    'nothing sent while the dead replica held the lease',
  )
})

t.test('a replica that stops hands the push over; the other goes on from the cursor', async (t) => {
  const holder = async () => {
    const [row] = await sql<{ holder: string | null }[]>`select holder from usage_export_cursors`
    return row?.holder ?? null
  }
  const current = await holder()
  const leaving = replicas.find((gw) => gw.app.usageExporter!.holder === current) ?? one!
  const staying = leaving === one ? two! : one!
  await traffic(6)
  const leavingHolder = leaving.app.usageExporter!.holder
  await leaving.close()
  t.not(await holder(), leavingHolder, 'the lease given up at the stop')
  await closeAt(T0 + 4 * MINUTE + 1_000)
  const { ok, want, got } = await caughtUp()
  t.ok(ok, `all there: ${JSON.stringify({ want, got })}`)
  t.equal(await holder(), staying.app.usageExporter!.holder, 'the other replica exports now')
  t.equal(served, 40)
})
