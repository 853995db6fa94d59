// A route's retries (docs/configuration.md, routes: `retries`), against real upstreams on loopback
// that refuse, reset or answer 503, each counting what it received: a connect failure retried for
// any method, a reset or a 503 only for a request safe to send twice and whose body is held, the
// budget stopping a storm, the backoff kept inside timeout_ms, a client that leaves mid-backoff,
// and a request counted once (usage, the request log, the quota, units) whatever its attempts.
import { randomBytes } from 'node:crypto'
import { request as httpRequest } from 'node:http'
import t, { type Test } from 'tap'
import { monthOf } from '../../src/limits/month.js'
import { monthUse } from '../../src/limits/store.js'
import { metricValue, type Parent, startGateway, type TestGateway } from '../helpers/gateway.js'
import { subAccountVia } from '../helpers/gateway-load.js'
import { callAs, rawRequest, sha256 } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import { echo, REFUSED_URL, startUpstream, type Upstream, type UpstreamHandler } from '../helpers/upstream.js'

const PREFIX = '/v1/retried'

interface Setup {
  gw: TestGateway
  parent: Parent
}

async function gatewayWith(t: Test, route: Record<string, unknown>, options = {}): Promise<Setup> {
  const gw = await startGateway(t, { gatewayConfig: { routes: [{ prefix: PREFIX, ...route }] }, ...options })
  return { gw, parent: await gw.createParent() }
}

/** One request over a real socket; `key`: an Idempotency-Key. */
function send(setup: Setup, method: string, body?: Buffer, key?: string) {
  return callAs(setup.gw.url, setup.parent.apiKey, {
    method,
    path: `${PREFIX}/x`,
    body,
    headers: key === undefined ? [] : [['Idempotency-Key', key]],
  })
}

const answers503: UpstreamHandler = (_request, response) => {
  response.writeHead(503, { 'content-type': 'text/plain' }).end('busy')
}
/** The connection ends once the request is read: a reset before any answer. */
const resets: UpstreamHandler = (request) => {
  request.socket.destroy()
}

const retried = (setup: Setup, reason: string) =>
  metricValue(setup.gw.app, 'tgw_upstream_retries_total', { route: PREFIX, reason })
const total = (upstreams: Upstream[]) => upstreams.reduce((sum, u) => sum + u.received.length, 0)

t.test('a connect failure is retried on another target, whatever the method', async (t) => {
  const live = await startUpstream(t)
  const setup = await gatewayWith(t, { targets: [{ url: REFUSED_URL }, { url: live.url }], balance: 'round_robin' })
  t.equal(await retried(setup, 'connect_failure'), 0, 'the series shows before the first retry')
  const body = randomBytes(200_000)
  for (const method of ['GET', 'POST', 'POST', 'PATCH']) {
    const res = await send(setup, method, method === 'GET' ? undefined : body)
    t.equal(res.status, 200, `${method} answered by the live target`)
  }
  t.equal(live.received.length, 4, 'each request reached the live target once')
  t.ok(
    live.received.filter((r) => r.method !== 'GET').every((r) => r.bodySha256 === sha256(body)),
    'a body longer than buffer_bytes goes whole: nothing of it had gone',
  )
  t.equal(await retried(setup, 'connect_failure'), 2, 'the two that went to the refusing target first')
})

t.test('with one upstream, a retry opens a new connection to it', async (t) => {
  const setup = await gatewayWith(t, { upstream: REFUSED_URL })
  t.equal((await send(setup, 'GET')).status, 502)
  t.equal(await retried(setup, 'connect_failure'), 1, 'one retry, which failed too')
  const none = await gatewayWith(t, { upstream: REFUSED_URL, retries: { attempts: 0 } })
  t.equal((await send(none, 'GET')).status, 502)
  t.equal(
    await metricValue(none.gw.app, 'tgw_upstream_retries_total', { route: PREFIX }),
    0,
    'attempts: 0: none, and no series',
  )
})

for (const [kind, handler, status] of [
  ['reset', resets, 502],
  ['503', answers503, 503],
] as const) {
  t.test(`${kind}: a POST without Idempotency-Key is never sent twice; with one it is retried`, async (t) => {
    const bad = await startUpstream(t, handler)
    const good = await startUpstream(t)
    const setup = await gatewayWith(t, {
      targets: [{ url: bad.url }, { url: good.url }],
      balance: 'round_robin',
      retries: { on: ['connect_failure', 'reset', 503], budget_percent: 100 },
    })
    const body = randomBytes(1000)
    const plain: number[] = []
    for (let i = 0; i < 6; i++) plain.push((await send(setup, 'POST', body)).status)
    t.equal(total([bad, good]), 6, 'six POSTs, six requests upstream: none sent twice')
    t.equal(plain.filter((s) => s === status).length, bad.received.length, `each that met the bad target: ${status}`)
    t.ok(bad.received.length > 0, 'some did')

    const badBefore = bad.received.length
    const goodBefore = good.received.length
    for (let i = 0; i < 6; i++) t.equal((await send(setup, 'POST', body, `key-${kind}-${i}`)).status, 200)
    const firstOnBad = bad.received.length - badBefore
    t.ok(firstOnBad > 0, 'some met the bad target first')
    t.equal(good.received.length - goodBefore, 6, 'each answered by the good target, once')
    t.ok(
      good.received.slice(goodBefore).every((r) => r.bodySha256 === sha256(body)),
      'the body held went again, whole',
    )
    t.equal(await retried(setup, kind), firstOnBad)

    for (let i = 0; i < 4; i++) t.equal((await send(setup, 'GET')).status, 200, 'a GET is retried')
    for (let i = 0; i < 4; i++) t.equal((await send(setup, 'PUT', body)).status, 200, 'a PUT is retried')
  })
}

t.test('an empty or blank Idempotency-Key is none: such a POST is never sent twice', async (t) => {
  const bad = await startUpstream(t, answers503)
  const good = await startUpstream(t)
  const setup = await gatewayWith(t, {
    targets: [{ url: bad.url }, { url: good.url }],
    balance: 'round_robin',
    retries: { on: [503], budget_percent: 100 },
  })
  const statuses: number[] = []
  for (const key of ['', '  ', '', '  ']) statuses.push((await send(setup, 'POST', randomBytes(100), key)).status)
  t.equal(total([bad, good]), 4, 'four POSTs, four requests upstream')
  t.equal(statuses.filter((s) => s === 503).length, bad.received.length, 'each that met the bad target: its 503')
  t.ok(bad.received.length > 0, 'some did')
})

t.test("a retry goes to another target, even past tenant_hash's choice", async (t) => {
  const bad = await startUpstream(t, answers503)
  const good = await startUpstream(t)
  const setup = await gatewayWith(t, {
    targets: [{ url: bad.url }, { url: good.url }],
    balance: 'tenant_hash',
    // The budget is not under test here: every retry allowed.
    retries: { on: [503], budget_percent: 100 },
  })
  for (let i = 0; i < 12; i++) {
    const tenant = await subAccountVia(setup.gw.url, setup.parent.apiKey, `tenant ${i}`)
    const res = await callAs(setup.gw.url, setup.parent.apiKey, { path: `${PREFIX}/x`, acting: tenant })
    t.equal(res.status, 200, 'a tenant hashed to the failing target is answered by the other')
  }
  t.equal(good.received.length, 12)
  t.equal(await retried(setup, '503'), bad.received.length, 'each that met the 503 was retried, once')
})

t.test('a reset or 503 is not retried unless `on` lists it', async (t) => {
  const bad = await startUpstream(t, answers503)
  const good = await startUpstream(t)
  const setup = await gatewayWith(t, { targets: [{ url: bad.url }, { url: good.url }], balance: 'round_robin' })
  const statuses: number[] = []
  for (let i = 0; i < 4; i++) statuses.push((await send(setup, 'GET')).status)
  t.equal(statuses.filter((s) => s === 503).length, 2, 'the default retries connect failures only')
  t.equal(total([bad, good]), 4)
})

t.test('a body longer than buffer_bytes is never retried, declared or streamed', async (t) => {
  const bad = await startUpstream(t, answers503)
  const good = await startUpstream(t)
  const setup = await gatewayWith(t, {
    targets: [{ url: bad.url }, { url: good.url }],
    balance: 'round_robin',
    retries: { on: [503], buffer_bytes: 1024, budget_percent: 100 },
  })
  const long = randomBytes(4096)
  const statuses: number[] = []
  for (let i = 0; i < 4; i++) statuses.push((await send(setup, 'PUT', long)).status)
  // Streamed: chunked, no Content-Length; the hold ends as it passes the limit.
  for (let i = 0; i < 4; i++) {
    const res = await rawRequest(setup.gw.url, {
      method: 'PUT',
      path: `${PREFIX}/x`,
      headers: [['Authorization', `Bearer ${setup.parent.apiKey}`]],
      body: long,
    })
    statuses.push(res.status)
  }
  t.equal(total([bad, good]), 8, 'eight PUTs, eight requests upstream')
  t.equal(statuses.filter((s) => s === 503).length, bad.received.length, 'each that met the 503 got it')
  t.ok(
    good.received.every((r) => r.bodySha256 === sha256(long)),
    'the rest went whole',
  )

  const short = randomBytes(1024)
  for (let i = 0; i < 4; i++) t.equal((await send(setup, 'PUT', short)).status, 200, 'a body within it is retried')
})

t.test('the budget stops a retry storm', async (t) => {
  const failing = await startUpstream(t, answers503)
  const setup = await gatewayWith(t, { upstream: failing.url, retries: { attempts: 5, on: [503], budget_percent: 20 } })
  for (let i = 0; i < 20; i++) t.equal((await send(setup, 'GET')).status, 503)
  const retries = failing.received.length - 20
  t.equal(await retried(setup, '503'), retries, 'each retry counted')
  t.ok(retries >= 3, `at least 3 in 10 s whatever the share (${retries})`)
  t.ok(retries < 20, `far from the 100 retries of five each (${retries})`)
  t.ok(
    (await metricValue(setup.gw.app, 'tgw_upstream_retry_budget_exhausted_total', { route: PREFIX })) > 0,
    'the budget says it refused',
  )
})

t.test('the backoff never passes timeout_ms', async (t) => {
  // Ten answered first, so that the budget (100 % of them) leaves room for every retry.
  const failing = await startUpstream(t, (request, response, received) =>
    failing.received.length <= 10 ? echo(request, response, received) : answers503(request, response, received),
  )
  const setup = await gatewayWith(t, {
    upstream: failing.url,
    timeout_ms: 300,
    retries: { attempts: 5, on: [503], budget_percent: 100 },
  })
  for (let i = 0; i < 10; i++) t.equal((await send(setup, 'GET')).status, 200)
  t.equal((await send(setup, 'GET')).status, 503)
  const attempts = failing.received.length - 10
  // Five retries wait at least 12.5 + 25 + 50 + 100 + 200 ms: more than 300.
  t.ok(attempts <= 5, `at most four retries within 300 ms (${attempts - 1})`)
  t.ok(attempts >= 2, 'and at least one')
})

t.test('a client that leaves during the backoff ends it, and its slot comes back', async (t) => {
  const failing = await startUpstream(t, answers503)
  const setup = await gatewayWith(t, {
    upstream: failing.url,
    timeout_ms: 10_000,
    retries: { attempts: 5, on: [503], budget_percent: 100 },
  })
  const held = () => metricValue(setup.gw.app, 'tgw_proxy_upstream_slots', { route: PREFIX, state: 'held' })
  const request = httpRequest(`${setup.gw.url}${PREFIX}/x`, {
    headers: { authorization: `Bearer ${setup.parent.apiKey}` },
  })
  request.on('error', () => {})
  request.end()
  t.ok(await until(10_000, async () => failing.received.length >= 2), 'retrying')
  request.destroy()
  t.ok(await until(5_000, async () => (await held()) === 0), 'the slot is back')
})

t.test('a request retried counts once: usage, the request log, the quota, and the units it got', async (t) => {
  const bad = await startUpstream(t, (_request, response) => {
    response.writeHead(503, { 'x-tokens-used': '100' }).end()
  })
  const good = await startUpstream(t, (request, response, received) => {
    response.setHeader('x-tokens-used', '7')
    echo(request, response, received)
  })
  const setup = await gatewayWith(
    t,
    {
      targets: [{ url: bad.url }, { url: good.url }],
      balance: 'round_robin',
      retries: { on: [503], budget_percent: 100 },
      meters: [{ name: 'tokens', header: 'X-Tokens-Used' }],
    },
    { usageFlushIntervalMs: 50, requestLog: { flushIntervalMs: 50 } },
  )
  const { gw, parent } = setup
  const created = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name: 'retried', limits: { monthly_quota: { requests: 100 } } },
  })
  const tenant = JSON.parse(created.body).id as string
  for (let i = 0; i < 4; i++) {
    const res = await callAs(gw.url, parent.apiKey, { path: `${PREFIX}/x`, acting: tenant })
    t.equal(res.status, 200)
  }
  t.equal(bad.received.length, 2, 'two met the 503 first')
  t.equal(await retried(setup, '503'), 2)

  await gw.app.usageMeter.flush()
  const day = new Date().toISOString().slice(0, 10)
  const usage = await callAs(gw.url, parent.apiKey, {
    path: `/v1/sub-accounts/usage?sub_account_id=${tenant}&from=${day}&to=${day}`,
  })
  const [entry] = JSON.parse(usage.body).data as { requests: number; units: Record<string, number> }[]
  t.equal(entry?.requests, 4, 'usage: four requests')
  t.equal(entry?.units.tokens, 28, "units of the answers the client got (7 each), none of the 503's")
  t.equal(
    await monthUse(gw.sql, { tenantId: tenant, level: 'sub_account' }, monthOf(Date.now())),
    4,
    'the quota counts four',
  )
  const records = async () => {
    await gw.app.requestLog!.flush()
    const res = await callAs(gw.url, parent.apiKey, { path: `/v1/sub-accounts/requests?sub_account_id=${tenant}` })
    return JSON.parse(res.body).data as { status: number }[]
  }
  t.ok(await until(10_000, async () => (await records()).length >= 4))
  t.same(
    (await records()).map((r) => r.status),
    [200, 200, 200, 200],
    'four records, each with the status the client got',
  )
})
