// What was served is counted, however its exchange ended (docs/billing.md, "Every ending counts"):
// a client that resets or closes mid-answer, an upstream that breaks off or cuts a declared length
// short, a metered answer whose trailer never comes, one whose units came in its header. For each,
// what the upstream really served (counted by the upstream itself, a raw socket server) against
// the usage report, the request log's records (status, bytes, outcome), a requests quota, and,
// after the period closes, the export and reconciliation. Real sockets, Postgres and Redis, on
// the real clock: periods of a minute, a grace of a second (the test waits for one real close).
// Its name starts it early among the integration files, as billing-reconciliation's does.
import { connect, createServer, type Socket } from 'node:net'
import type { FastifyReply, FastifyRequest } from 'fastify'
import t from 'tap'
import { monthOf } from '../../src/limits/month.js'
import { monthUse } from '../../src/limits/store.js'
import type { ReconciliationEntry } from '../../src/usage/reconciliation.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import { listenOnLoopback } from '../helpers/upstream.js'

const MINUTE = 60_000
const WAIT_MS = 30_000
const iso = (ms: number) => `${new Date(ms).toISOString().slice(0, 19)}Z`
const day = (ms: number) => new Date(ms).toISOString().slice(0, 10)

/** The bytes of each chunk the upstream streams; the last one before a hold ends with `!`. */
const CHUNK = 32
const chunkOf = (last: boolean) => Buffer.from('x'.repeat(CHUNK - 1) + (last ? '!' : 'x'))

/** What the upstream served: one entry a request, its body bytes written while its connection lasted. */
interface Served {
  tenant: string
  bytes: number
}
const served: Served[] = []

/**
 * The upstream, on raw sockets so that it can end an answer any way (`?mode=`): `stream` n chunks
 * `gap` ms apart then the last chunk (and the `x-tokens-used` trailer with `trailer=`); `hold` n
 * chunks then nothing until the gateway leaves; `break` n chunks then the connection ends without
 * the last chunk; `short` 300 of a declared 1,000 bytes then the end; `silent` nothing at all. `tokens=` reports units in
 * the header. Every answer says `connection: close`.
 */
const upstream = createServer((socket) => {
  socket.on('error', () => {})
  let head = ''
  socket.on('data', (chunk: Buffer) => {
    if (head.includes('\r\n\r\n')) return
    head += chunk.toString('latin1')
    if (head.includes('\r\n\r\n')) answer(socket, head)
  })
})
const timers = new Set<NodeJS.Timeout>()
t.teardown(() => {
  for (const timer of timers) clearTimeout(timer)
})

function answer(socket: Socket, head: string): void {
  const url = new URL(head.split(' ')[1]!, 'http://upstream')
  const query = url.searchParams
  const tenant = /x-service-resolved-tenant: ([0-9a-f-]+)/i.exec(head)?.[1] ?? ''
  const entry: Served = { tenant, bytes: 0 }
  served.push(entry)
  const mode = query.get('mode')
  const n = Number(query.get('n') ?? 3)
  const tokens = query.get('tokens')
  const headers = ['HTTP/1.1 200 OK', 'content-type: text/plain', 'connection: close']
  if (tokens !== null) headers.push(`x-tokens-used: ${tokens}`)
  if (mode === 'silent') return
  if (mode === 'short') {
    socket.write(`${[...headers, 'content-length: 1000'].join('\r\n')}\r\n\r\n`)
    socket.end(Buffer.alloc(300, 'x'))
    entry.bytes = 300
    return
  }
  if (query.has('trailer')) headers.push('trailer: x-tokens-used')
  socket.write(`${[...headers, 'transfer-encoding: chunked'].join('\r\n')}\r\n\r\n`)
  const send = (data: Buffer) => {
    if (socket.destroyed) return
    socket.write(`${data.length.toString(16)}\r\n`)
    socket.write(data)
    socket.write('\r\n')
    entry.bytes += data.length
  }
  if (mode === 'stream') {
    const gap = Number(query.get('gap') ?? 100)
    let sent = 0
    const next = () => {
      const timer = setTimeout(() => {
        timers.delete(timer)
        if (socket.destroyed) return
        send(chunkOf(false))
        if (++sent < n) return next()
        const trailer = query.get('trailer')
        socket.end(trailer === null ? '0\r\n\r\n' : `0\r\nx-tokens-used: ${trailer}\r\n\r\n`)
      }, gap)
      timers.add(timer)
    }
    next()
    return
  }
  for (let i = 0; i < n; i++) send(chunkOf(i === n - 1))
  if (mode === 'break') socket.end()
  // hold: nothing more; the gateway's leaving closes the connection.
}

const { port } = await listenOnLoopback(t, upstream)
const gw = await startGateway(t, {
  usageFlushIntervalMs: 50,
  usagePeriods: { closeIntervalMs: 50 },
  requestLog: { flushIntervalMs: 50 },
  env: { USAGE_PERIOD_SECONDS: '60', USAGE_CLOSE_GRACE_SECONDS: '1', ISSUER_URL: 'https://gateway.example' },
  gatewayConfig: {
    routes: [
      { prefix: '/s', upstream: `http://127.0.0.1:${port}` },
      { prefix: '/m', upstream: `http://127.0.0.1:${port}`, meters: [{ name: 'tokens', header: 'X-Tokens-Used' }] },
    ],
  },
})
const P = await gw.createParent({ name: 'P' })
/** Each case's sub-account, under a requests quota of QUOTA: what it served counts against it. */
const QUOTA = 6
const subAccount = async (name: string) => {
  const res = await callAs(gw.url, P.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name, limits: { monthly_quota: { requests: QUOTA } } },
  })
  if (res.status !== 201) throw new Error(`${res.status} ${res.body}`)
  return JSON.parse(res.body).id as string
}

/**
 * A GET on a raw socket, as `tenant`, asking the gateway to close after it: `leave` (given the body
 * so far, framing and all) says when the client resets or closes its side; resolves with what
 * it received once the connection is closed.
 */
function rawGet(
  path: string,
  tenant: string,
  leave?: { when: (body: string) => boolean; how: 'reset' | 'close' },
  resetter?: (reset: () => void) => void,
) {
  return new Promise<string>((resolve) => {
    const socket = connect(gw.port, '127.0.0.1')
    resetter?.(() => socket.resetAndDestroy())
    let text = ''
    let left = false
    socket.on('error', () => {})
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1')
      const start = text.indexOf('\r\n\r\n')
      if (left || leave === undefined || start === -1 || !leave.when(text.slice(start + 4))) return
      left = true
      if (leave.how === 'reset') socket.resetAndDestroy()
      else socket.end()
    })
    socket.on('close', () => resolve(text))
    socket.write(
      `GET ${path} HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer ${P.apiKey}\r\n` +
        `X-Service-Acting-Tenant: ${tenant}\r\nConnection: close\r\n\r\n`,
    )
  })
}

interface LogRecord {
  status: number
  response_bytes: number
  outcome: string
  units?: Record<string, number>
}
const records = async (tenant: string): Promise<LogRecord[]> => {
  await gw.app.requestLog!.flush()
  const res = await callAs(gw.url, P.apiKey, { path: `/v1/sub-accounts/requests?sub_account_id=${tenant}&limit=100` })
  if (res.status !== 200) throw new Error(`${res.status} ${res.body}`)
  return (JSON.parse(res.body).data as LogRecord[]).reverse()
}
const FROM = Math.floor(Date.now() / MINUTE) * MINUTE
const usage = async (tenant: string) => {
  await gw.app.usageMeter.flush()
  const res = await callAs(gw.url, P.apiKey, {
    path: `/v1/sub-accounts/usage?sub_account_id=${tenant}&from=${day(FROM)}&to=${day(Date.now())}`,
  })
  if (res.status !== 200) throw new Error(`${res.status} ${res.body}`)
  const [entry] = JSON.parse(res.body).data as { requests: number; units: Record<string, number> }[]
  return entry ?? { requests: 0, units: {} }
}
const servedTo = (tenant: string) => served.filter((entry) => entry.tenant === tenant)
/** Waits until the log holds `count` records of `tenant` (its exchanges are counted as they end). */
const logged = (tenant: string, count: number) => until(WAIT_MS, async () => (await records(tenant)).length >= count)

/** Each case's sub-account, and the units it was served, for the export and reconciliation. */
const cases: { name: string; tenant: string; tokens: number }[] = []

t.test("the issue's case: three resets after 64 bytes of a 10-chunk answer, then a whole one", async (t) => {
  const tenant = await subAccount('resets')
  cases.push({ name: 'resets', tenant, tokens: 0 })
  const path = '/s/chunks?mode=stream&n=10&gap=100'
  for (let i = 0; i < 3; i++) await rawGet(path, tenant, { when: (body) => body.length >= 64, how: 'reset' })
  const whole = await rawGet(path, tenant)
  t.match(whole, /^HTTP\/1\.1 200 /, 'the whole one is answered')
  t.ok(await logged(tenant, 4), 'four records')
  t.equal(servedTo(tenant).length, 4, 'the upstream served four')
  t.equal((await usage(tenant)).requests, 4, 'the usage report says 4')
  const log = await records(tenant)
  t.same(
    log.map((record) => [record.status, record.outcome]),
    [...Array(3).fill([200, 'client_aborted']), [200, 'completed']],
    'three cut short by their client, one whole, each with the upstream status',
  )
  for (const record of log.slice(0, 3)) {
    t.ok(record.response_bytes >= 64 && record.response_bytes < 10 * CHUNK, `${record.response_bytes} bytes sent`)
    t.equal(record.response_bytes % CHUNK, 0, 'whole chunks of what came')
  }
  t.equal(log[3]!.response_bytes, 10 * CHUNK, 'the whole one: all of it')
  t.equal(
    await monthUse(gw.sql, { tenantId: tenant, level: 'sub_account' }, monthOf(Date.now())),
    4,
    'the quota counts 4 where it is rebuilt from',
  )
  // The quota of 6 has 2 left: two more pass, the next is refused.
  for (let i = 0; i < 2; i++) t.match(await rawGet('/s/x?mode=short', tenant), /^HTTP\/1\.1 200 /)
  t.match(await rawGet('/s/x?mode=short', tenant), /^HTTP\/1\.1 429 /, 'the seventh request is past the quota')
  t.ok(await logged(tenant, 7))
  t.equal((await usage(tenant)).requests, 7, 'the refusal counts too, as before')
  t.equal(servedTo(tenant).length, 6)
})

t.test('an exchange already counted is not counted again, whichever of its ends comes second', async (t) => {
  // fastify's onResponse may come on the response's 'error', and the exchange's close after it:
  // both call the same accounting, which returns at once for an exchange it counted.
  const counted = { exchange: { accounted: true } } as unknown as FastifyRequest
  t.doesNotThrow(() => gw.app.accountRequest(counted, {} as FastifyReply), 'nothing read, nothing counted')
})

t.test('a client that closes cleanly mid-answer: the bytes it was sent, client_aborted', async (t) => {
  const tenant = await subAccount('closes')
  cases.push({ name: 'closes', tenant, tokens: 0 })
  await rawGet('/s/x?mode=hold&n=3', tenant, { when: (body) => body.includes('!'), how: 'close' })
  t.ok(await logged(tenant, 1))
  t.equal((await usage(tenant)).requests, 1)
  t.match(await records(tenant), [{ status: 200, response_bytes: 3 * CHUNK, outcome: 'client_aborted' }])
  t.same(
    servedTo(tenant).map((entry) => entry.bytes),
    [3 * CHUNK],
    'what the upstream served',
  )
})

t.test('an upstream that breaks off mid-body: upstream_aborted, the bytes that came', async (t) => {
  const tenant = await subAccount('breaks')
  cases.push({ name: 'breaks', tenant, tokens: 0 })
  await rawGet('/s/x?mode=break&n=5', tenant)
  t.ok(await logged(tenant, 1))
  t.equal((await usage(tenant)).requests, 1)
  t.match(await records(tenant), [{ status: 200, response_bytes: 5 * CHUNK, outcome: 'upstream_aborted' }])
  t.same(
    servedTo(tenant).map((entry) => entry.bytes),
    [5 * CHUNK],
  )
})

t.test('a Content-Length cut short: the bytes sent, not those declared', async (t) => {
  const tenant = await subAccount('short')
  cases.push({ name: 'short', tenant, tokens: 0 })
  await rawGet('/s/x?mode=short', tenant)
  t.ok(await logged(tenant, 1))
  t.equal((await usage(tenant)).requests, 1)
  t.match(await records(tenant), [{ status: 200, response_bytes: 300, outcome: 'upstream_aborted' }])
})

t.test('a metered answer whose trailer never comes: counted, its units 0', async (t) => {
  const tenant = await subAccount('no-trailer')
  cases.push({ name: 'no-trailer', tenant, tokens: 0 })
  // The client resets before it; then the upstream breaks off before it.
  await rawGet('/m/x?mode=hold&n=2&trailer', tenant, { when: (body) => body.includes('!'), how: 'reset' })
  await rawGet('/m/x?mode=break&n=2&trailer', tenant)
  t.ok(await logged(tenant, 2))
  const report = await usage(tenant)
  t.equal(report.requests, 2)
  t.notOk(report.units.tokens, 'no tokens: none was reported')
  const log = await records(tenant)
  t.match(log, [
    { status: 200, response_bytes: 2 * CHUNK, outcome: 'client_aborted' },
    { status: 200, response_bytes: 2 * CHUNK, outcome: 'upstream_aborted' },
  ])
  t.same(
    log.map((record) => record.units),
    [undefined, undefined],
    'the records report no units',
  )
})

t.test('a metered answer whose units came in its header, cut short: its units count', async (t) => {
  const tenant = await subAccount('header')
  cases.push({ name: 'header', tenant, tokens: 42 })
  await rawGet('/m/x?mode=hold&n=2&tokens=42', tenant, { when: (body) => body.includes('!'), how: 'reset' })
  t.ok(await logged(tenant, 1))
  const report = await usage(tenant)
  t.equal(report.requests, 1)
  t.equal(report.units.tokens, 42, 'the 42 tokens of the header')
  t.match(await records(tenant), [{ status: 200, outcome: 'client_aborted', units: { tokens: 42 } }])
  t.equal(
    await monthUse(gw.sql, { tenantId: tenant, level: 'sub_account' }, monthOf(Date.now()), 'tokens'),
    42,
    "a tokens quota's month counts them",
  )
})

t.test('a client that leaves before any answer: counted 499, its upstream had it', async (t) => {
  const tenant = await subAccount('early')
  cases.push({ name: 'early', tenant, tokens: 0 })
  let reset = () => {}
  const gone = rawGet('/s/x?mode=silent', tenant, { when: () => false, how: 'reset' }, (leave) => (reset = leave))
  t.ok(await until(WAIT_MS, async () => servedTo(tenant).length === 1), 'the upstream has it')
  reset()
  t.equal(await gone, '', 'no answer came')
  t.ok(await logged(tenant, 1))
  const report = await usage(tenant)
  t.equal(report.requests, 1)
  t.match(await records(tenant), [{ status: 499, response_bytes: 0, outcome: 'client_aborted' }])
})

t.test('after the period closes: the export and reconciliation hold what was served', async (t) => {
  const last = Date.now()
  const end = Math.floor(last / MINUTE) * MINUTE + MINUTE
  const reconciliation = async () => {
    const res = await callAs(gw.url, P.apiKey, {
      path: `/v1/sub-accounts/usage/reconciliation?from=${iso(FROM)}&to=${iso(end)}`,
    })
    if (res.status !== 200) throw new Error(`${res.status} ${res.body}`)
    return { closedUntil: res.headers['x-usage-closed-until'] as string | undefined, ...JSON.parse(res.body) }
  }
  t.ok(
    await until(
      3 * MINUTE,
      async () => {
        const { closedUntil } = await reconciliation()
        return closedUntil !== undefined && Date.parse(closedUntil) >= end
      },
      200,
    ),
    'closed',
  )
  const pulled = await callAs(gw.url, P.apiKey, {
    path: `/v1/sub-accounts/usage/export?from=${iso(FROM)}&to=${iso(end)}&format=ndjson`,
  })
  t.equal(pulled.status, 200)
  const exported = pulled.body
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line).data as { sub_account_id: string; meter: string; units: number })
  const { data } = (await reconciliation()) as { data: ReconciliationEntry[] }
  for (const { name, tenant, tokens } of cases) {
    const forwarded = servedTo(tenant).length
    const sum = (meter: string) =>
      exported.filter((e) => e.sub_account_id === tenant && e.meter === meter).reduce((n, e) => n + e.units, 0)
    t.equal(sum('requests'), forwarded, `${name}: the export bills the ${forwarded} requests served`)
    t.equal(sum('tokens'), tokens, `${name}: and the ${tokens} tokens reported`)
    const entry = data.find((e) => e.sub_account_id === tenant && e.meter === 'requests')
    t.match(
      entry,
      { meter_units: forwarded, limiter_units: forwarded, log_units: forwarded, exported_units: forwarded },
      `${name}: the meter, the limiter, the log and the export each count ${forwarded}`,
    )
    t.same(entry?.differences, [], `${name}: no difference`)
  }
})
