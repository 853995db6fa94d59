// Time and connections on a proxied route are bounded (docs/api.md), over real sockets: one
// tenant's slow uploads or unread downloads cannot take a route from everyone else, a request
// waits for a busy upstream no longer than the route's timeout, a stalled body and a client that
// stops reading are cut off, and a client that hangs up is not an upstream failure.
import type { ServerResponse } from 'node:http'
import { type AddressInfo, createServer as createNetServer, connect, type Socket } from 'node:net'
import pino from 'pino'
import t, { type Test } from 'tap'
import { loggerOptions } from '../../src/ops/logging.js'
import { DEFAULT_TIMEOUT_MS } from '../../src/proxy/route-limits.js'
import { subAccountVia } from '../helpers/gateway-load.js'
import { freshDatabase } from '../helpers/db.js'
import { type GatewayOptions, metricValue, type Parent, startGateway, type TestGateway } from '../helpers/gateway.js'
import { callAs, type RawResponse } from '../helpers/http.js'
import { checkProblem } from '../helpers/problems.js'
import { eventually, orTimeout, sleep } from '../helpers/poll.js'
import { echo, holdingUpstream, startUpstream } from '../helpers/upstream.js'

/** A socket to the gateway with a request head written, and everything it answered so far. */
interface OpenRequest {
  socket: Socket
  /** What the gateway sent back, as text (the head of a refusal, say). */
  answered(): string
  closed: Promise<void>
  /** For a request opened without reading: reads from now on; how many bytes came in all, at close. */
  readToTheEnd(): Promise<number>
}

function openRequest(port: number, head: string, options: { reading?: boolean } = {}): Promise<OpenRequest> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1')
    let text = ''
    const closed = new Promise<void>((done) => socket.once('close', () => done()))
    socket.on('error', () => {})
    if (options.reading === false) socket.pause()
    else socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')))
    const readToTheEnd = async () => {
      let bytes = 0
      socket.on('data', (chunk: Buffer) => (bytes += chunk.length))
      socket.resume()
      await closed
      return bytes
    }
    socket.once('connect', () => {
      socket.write(head)
      resolve({ socket, answered: () => text, closed, readToTheEnd })
    })
    socket.once('error', reject)
  })
}

function head(method: string, path: string, apiKey: string, extra: string[] = []): string {
  return [`${method} ${path} HTTP/1.1`, 'Host: gw', `Authorization: Bearer ${apiKey}`, ...extra, '', ''].join('\r\n')
}

/**
 * How long another tenant's GET may take, in ms. Were the route taken, it would wait for a
 * connection until the route's timeout (the default, in these tests' routes) and get a 503: any
 * bound well below tells the two apart, and a third of it leaves a loaded machine its stalls.
 */
const ANSWERED_WITHIN_MS = DEFAULT_TIMEOUT_MS / 3

/** Another tenant's GET, timed: it must be answered 200 well before the route's timeout. */
async function answersQuickly(t: Test, gw: TestGateway, parent: Parent, path: string, what: string): Promise<void> {
  const started = performance.now()
  const res = await orTimeout(callAs(gw.url, parent.apiKey, { path }), ANSWERED_WITHIN_MS, null)
  t.ok(res !== null, `${what}: answered within ${ANSWERED_WITHIN_MS / 1000} s`)
  t.equal(res?.status, 200, `${what}: 200${res?.status === 200 ? '' : ` (${res?.body.slice(0, 300)})`}`)
  t.comment(`${what}: ${Math.round(performance.now() - started)} ms`)
}

/** Waits (5 s unless told) until `check` holds; throws when it does not, naming it. */
async function waitFor(check: () => boolean | Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  if ((await eventually(timeoutMs, async () => check())) === null) throw new Error(`timed out waiting for ${check}`)
}

const MEBIBYTE = Buffer.alloc(1024 * 1024, 'm')

/**
 * Answers `count` MiB, writing as the client takes them. 32 MiB is more than loopback buffers hold,
 * so the writes stall on a client that reads nothing.
 */
function sendMebibytes(response: ServerResponse, count: number): void {
  response.writeHead(200, {
    'content-type': 'application/octet-stream',
    'content-length': String(count * MEBIBYTE.length),
  })
  let sent = 0
  const more = () => {
    // A write that returns false still took its chunk: counted once the buffer drains.
    while (sent < count && response.write(MEBIBYTE)) sent++
    if (sent === count) return void response.end()
    response.once('drain', () => {
      sent++
      more()
    })
  }
  more()
}

function closeAll(requests: OpenRequest[]): void {
  for (const request of requests) request.socket.destroy()
}

const PER_TENANT = 64 // a quarter of the default max_connections, 256

// One database for every gateway of the file (a fresh one is a third of a second each): every
// test makes its own parents, and reads back only what their tenants did.
const db = await freshDatabase(t)
const gatewayOnSharedDb = (t: Test, options: GatewayOptions) => startGateway(t, { ...options, database: db })

t.test('128 slow uploads by one tenant leave the route to the others', async (t) => {
  const upstream = await startUpstream(t)
  const gw = await gatewayOnSharedDb(t, {
    gatewayConfig: { routes: [{ prefix: '/v1/shipments', upstream: upstream.url }] },
  })
  const [slow, other] = [await gw.createParent(), await gw.createParent()]

  const uploads = await Promise.all(
    Array.from({ length: 128 }, () =>
      openRequest(gw.port, head('POST', '/v1/shipments/slow', slow.apiKey, ['Content-Length: 1000000'])),
    ),
  )
  t.teardown(() => closeAll(uploads))
  const drip = setInterval(() => {
    for (const upload of uploads) if (!upload.socket.destroyed) upload.socket.write('x')
  }, 1_000)
  t.teardown(() => clearInterval(drip))

  const refused = () => uploads.filter((upload) => upload.answered().startsWith('HTTP/1.1 429 ')).length
  await waitFor(() => refused() === 128 - PER_TENANT, 10_000)
  t.equal(refused(), 128 - PER_TENANT, `past its ${PER_TENANT} in flight, the tenant is refused 429`)
  const refusal = uploads.find((upload) => upload.answered().startsWith('HTTP/1.1 429 '))!.answered()
  t.match(refusal, /\r\nretry-after: 1\r\n/i, 'with Retry-After: 1')
  t.match(refusal, /"code":"too_many_concurrent_requests"/)

  for (let i = 1; i <= 5; i++) await answersQuickly(t, gw, other, `/v1/shipments/${i}`, `another tenant's GET ${i}`)
  t.equal(
    await metricValue(gw.app, 'tgw_http_requests_total', { kind: 'proxy', status_class: '5xx' }),
    0,
    'nothing counted as an upstream failure',
  )
})

t.test('128 unread downloads by one tenant leave the route to the others', async (t) => {
  const upstream = await startUpstream(t, (request, response) => {
    if (!request.url!.startsWith('/v1/files/big')) {
      response.end('small')
      return
    }
    sendMebibytes(response, 32)
  })
  const gw = await gatewayOnSharedDb(t, {
    gatewayConfig: { routes: [{ prefix: '/v1/files', upstream: upstream.url }] },
  })
  const [greedy, other] = [await gw.createParent(), await gw.createParent()]
  // The other tenant's key is known before the downloads: what is timed below is the route's
  // share, not a cold key's first lookup on a loaded machine.
  t.equal((await callAs(gw.url, other.apiKey, { path: '/v1/files/warm' })).status, 200, 'the other key warmed')

  const downloads = await Promise.all(
    Array.from({ length: 128 }, () =>
      openRequest(gw.port, head('GET', '/v1/files/big', greedy.apiKey), { reading: false }),
    ),
  )
  t.teardown(() => closeAll(downloads))
  const bigOnes = () => upstream.received.filter((r) => r.url === '/v1/files/big').length
  await waitFor(() => bigOnes() === PER_TENANT, 10_000)
  await sleep(300)
  t.equal(bigOnes(), PER_TENANT, `the upstream got ${PER_TENANT} of the 128, no more`)

  for (let i = 1; i <= 5; i++) await answersQuickly(t, gw, other, `/v1/files/small-${i}`, `another tenant's GET ${i}`)
})

t.test('a full route: 429 for a tenant at its share, a bounded wait for the others', async (t) => {
  // Answers after ?ms= milliseconds; /trickle answers at once and sends its body a byte every
  // 200 ms for that long (in flight past the route's timeout, which bounds each wait, not the whole).
  const upstream = await startUpstream(t, (request, response, received) => {
    const ms = Number(new URL(request.url!, 'http://u').searchParams.get('ms') ?? 0)
    if (!request.url!.startsWith('/v1/q/trickle')) return void setTimeout(() => echo(request, response, received), ms)
    response.writeHead(200)
    const drip = setInterval(() => response.write('.'), 200)
    setTimeout(() => {
      clearInterval(drip)
      response.end()
    }, ms)
  })
  const gw = await gatewayOnSharedDb(t, {
    gatewayConfig: {
      routes: [
        {
          prefix: '/v1/q',
          upstream: upstream.url,
          max_connections: 2,
          max_connections_per_tenant: 1,
          timeout_ms: 1_500,
        },
      ],
    },
  })
  const [a, b, c] = [await gw.createParent(), await gw.createParent(), await gw.createParent()]
  const inFlight = () => upstream.received.length

  // Phase 1: two tenants hold both connections longer than the route's timeout.
  const heldA = callAs(gw.url, a.apiKey, { path: '/v1/q/trickle?ms=3000' })
  const heldB = callAs(gw.url, b.apiKey, { path: '/v1/q/trickle?ms=3000' })
  await sleep(200)
  const tooMany = await callAs(gw.url, a.apiKey, { path: '/v1/q/x' })
  checkProblem(t, tooMany, 429, 'too_many_concurrent_requests', 'a second request of a tenant at its share')
  t.equal(tooMany.headers['retry-after'], '1', '429: Retry-After: 1')

  const started = performance.now()
  const busy = await callAs(gw.url, c.apiKey, { path: '/v1/q/x' })
  const waited = performance.now() - started
  checkProblem(t, busy, 503, 'upstream_busy', 'every connection busy')
  t.equal(busy.headers['retry-after'], '1', '503: Retry-After: 1')
  t.ok(
    waited >= 1_300 && waited < 4_000,
    `it waited about timeout_ms (1500) for a connection: ${Math.round(waited)} ms`,
  )
  const [ra, rb] = await Promise.all([heldA, heldB])
  t.same([ra.status, rb.status], [200, 200], 'the ones that held the connections were answered whole')
  t.equal(upstream.received.filter((r) => r.url === '/v1/q/x').length, 0, 'the upstream saw neither refusal')

  // Phase 2: a waiter gets the first connection given back.
  const before = inFlight()
  const shortA = callAs(gw.url, a.apiKey, { path: '/v1/q/short?ms=500' })
  const shortB = callAs(gw.url, b.apiKey, { path: '/v1/q/short?ms=500' })
  await sleep(100)
  const waitedFor = await callAs(gw.url, c.apiKey, { path: '/v1/q/waited' })
  const [sa, sb] = await Promise.all([shortA, shortB])
  t.same([sa.status, sb.status, waitedFor.status], [200, 200, 200], 'a waiter gets a connection once one is free')
  t.equal(inFlight() - before, 3, 'all three reached the upstream')

  const again = await callAs(gw.url, a.apiKey, { path: '/v1/q/after' })
  t.equal(again.status, 200, 'slots and shares are given back: the tenant gets in again')
})

t.test(
  "a parent's sub-accounts share one account share: four slow uploads leave the route to another parent",
  async (t) => {
    const upstream = await startUpstream(t)
    const gw = await gatewayOnSharedDb(t, {
      gatewayConfig: {
        routes: [{ prefix: '/v1/uploads', upstream: upstream.url, max_connections: 4, max_connections_per_tenant: 1 }],
      },
    })
    const [parent, other] = [await gw.createParent(), await gw.createParent({ name: 'other' })]
    const port = Number(new URL(gw.url).port)
    const subs: string[] = []
    for (let i = 1; i <= 4; i++) {
      const res = await gw.call(parent.apiKey, {
        method: 'POST',
        url: '/v1/sub-accounts',
        acting: 'self',
        body: { name: `sub ${i}` },
      })
      t.equal(res.statusCode, 201, res.body)
      subs.push(res.json().id as string)
    }
    // The parent acting as each of its four sub-accounts: one upload each, its body never sent.
    const uploads = await Promise.all(
      subs.map((sub) =>
        openRequest(
          port,
          head('POST', '/v1/uploads/big', parent.apiKey, [
            `X-Service-Acting-Tenant: ${sub}`,
            'Content-Length: 1048576',
          ]),
        ),
      ),
    )
    t.teardown(() => closeAll(uploads))
    const slots = () => metricValue(gw.app, 'tgw_proxy_upstream_slots', { route: '/v1/uploads', state: 'held' })
    await waitFor(() => uploads.filter((u) => u.answered() !== '').length === 2)
    const refused = uploads.filter((u) => u.answered() !== '')
    for (const upload of refused) {
      t.match(upload.answered(), /^HTTP\/1\.1 429 /, 'a third and fourth sub-account of the same parent: 429 at once')
      t.match(upload.answered(), /too_many_concurrent_requests/)
      t.match(upload.answered(), /this account and its sub-accounts already have 2 requests in flight/)
    }
    t.equal(await slots(), 2, 'the two others hold their slots: half of max_connections, the account share')
    await answersQuickly(t, gw, other, '/v1/uploads/small', 'another parent, while the uploads hold')
    closeAll(uploads)
    await waitFor(async () => (await slots()) === 0)
    const again = await callAs(gw.url, parent.apiKey, { path: '/v1/uploads/after', acting: subs[0]! })
    t.equal(again.status, 200, 'the account share is given back with the slots')
  },
)

t.test('a body that sends nothing for body_idle_timeout_ms: 408, and the upstream connection is freed', async (t) => {
  const upstream = await startUpstream(t)
  const gw = await gatewayOnSharedDb(t, {
    gatewayConfig: {
      routes: [{ prefix: '/v1/u', upstream: upstream.url, body_idle_timeout_ms: 500, max_connections: 1 }],
    },
  })
  const parent = await gw.createParent()
  const started = performance.now()
  const stalled = await openRequest(gw.port, head('POST', '/v1/u/stall', parent.apiKey, ['Content-Length: 100']))
  stalled.socket.write('0123456789')
  await stalled.closed
  const after = performance.now() - started
  t.match(stalled.answered(), /^HTTP\/1\.1 408 /, '408')
  t.match(stalled.answered(), /"code":"request_timeout"/)
  t.match(stalled.answered(), /\r\nconnection: close\r\n/i, 'and the connection is closed')
  t.ok(after >= 450 && after < 5_000, `after about body_idle_timeout_ms (500): ${Math.round(after)} ms`)

  const next = await callAs(gw.url, parent.apiKey, { method: 'POST', path: '/v1/u/next', body: 'whole' })
  t.equal(next.status, 200, 'the one upstream connection of the route serves the next request')
  t.equal(JSON.parse(next.body).bodyBytes, 5)

  // A body that keeps coming, slower than the idle timeout between chunks but never idle that long.
  const steady = await openRequest(gw.port, head('POST', '/v1/u/steady', parent.apiKey, ['Content-Length: 4']))
  for (const byte of 'abcd') {
    await sleep(300)
    steady.socket.write(byte)
  }
  await waitFor(() => steady.answered().includes('\r\n\r\n'))
  t.match(steady.answered(), /^HTTP\/1\.1 200 /, 'a slow but steady body is not idle')
  steady.socket.destroy()
})

t.test('a client that stops reading is cut off after response_idle_timeout_ms', async (t) => {
  const upstream = await startUpstream(t, (request, response) => {
    if (request.url === '/v1/r/small') return void response.end('small')
    sendMebibytes(response, 32)
  })
  const gw = await gatewayOnSharedDb(t, {
    gatewayConfig: {
      routes: [
        {
          prefix: '/v1/r',
          upstream: upstream.url,
          max_connections: 1,
          response_idle_timeout_ms: 1_000,
          timeout_ms: 300,
        },
      ],
    },
  })
  const [reader, other] = [await gw.createParent(), await gw.createParent()]
  const stuck = await openRequest(gw.port, head('GET', '/v1/r/big', reader.apiKey), { reading: false })
  await waitFor(() => upstream.received.some((r) => r.url === '/v1/r/big'))

  const meanwhile = await callAs(gw.url, other.apiKey, { path: '/v1/r/small' })
  checkProblem(t, meanwhile, 503, 'upstream_busy', 'while the only connection is held')

  const cutOff = await eventually(15_000, async () => {
    return (await metricValue(gw.app, 'tgw_client_aborts_total', { reason: 'stopped_reading' })) === 1
  })
  t.ok(cutOff !== null, `cut off, counted as a client that stopped reading (${cutOff} ms after the 503)`)
  const after = await callAs(gw.url, other.apiKey, { path: '/v1/r/small' })
  t.equal(after.status, 200, 'its upstream connection is free again')
  const bytes = await orTimeout(stuck.readToTheEnd(), 10_000, -1)
  t.ok(bytes > 0 && bytes < 32 * MEBIBYTE.length, `the client got part of the answer, then the end: ${bytes} bytes`)
})

t.test('a client that hangs up is a client abort: info, counted apart, no 5xx, counted 499 once sent', async (t) => {
  const lines: string[] = []
  const logger = pino(loggerOptions('info'), { write: (line: string) => lines.push(line) })
  const upstream = await holdingUpstream(t, { holdPrefix: '/v1/h/wait', delayMs: [0, 0] })
  const gw = await gatewayOnSharedDb(t, {
    logger,
    usageFlushIntervalMs: 50,
    gatewayConfig: { routes: [{ prefix: '/v1/h', upstream: upstream.url }] },
    // Set, so that the start logs no warning about it: every warning below is the aborts'.
    env: { ISSUER_URL: 'http://127.0.0.1' },
  })
  const parent = await gw.createParent()

  // Mid-upload, and while waiting for the upstream's answer.
  const upload = await openRequest(gw.port, head('POST', '/v1/h/up', parent.apiKey, ['Content-Length: 1000']))
  upload.socket.write('0123456789')
  await sleep(200)
  upload.socket.destroy()
  const waiting = await openRequest(gw.port, head('GET', '/v1/h/wait', parent.apiKey))
  await waitFor(() => upstream.held() === 1)
  waiting.socket.destroy()

  await waitFor(async () => (await metricValue(gw.app, 'tgw_client_aborts_total', { reason: 'hung_up' })) === 2)
  upstream.release()
  const entries = lines.map(
    (line) => JSON.parse(line) as { level: number; msg: string; reason?: string; reqId?: string },
  )
  const aborts = entries.filter((entry) => entry.msg === 'client abort')
  t.equal(aborts.length, 2, 'both logged as client aborts')
  t.ok(
    aborts.every((entry) => entry.level === 30 && entry.reason === 'hung_up' && entry.reqId !== undefined),
    'at info, with their request ids',
  )
  // About the requests: a machine under load may also log the cache's Redis timing out, by itself.
  t.same(
    entries.filter((entry) => entry.level >= 40 && entry.reqId !== undefined).map((entry) => entry.msg),
    [],
    'nothing about the requests at warn or error',
  )
  t.equal(await metricValue(gw.app, 'tgw_http_requests_total', { kind: 'proxy', status_class: '5xx' }), 0, 'no 5xx')

  const fine = await callAs(gw.url, parent.apiKey, { path: '/v1/h/fine' })
  t.equal(fine.status, 200)
  await waitFor(async () => {
    const rows =
      await gw.sql`select coalesce(sum(requests), 0)::int as n from usage_daily where tenant_id = ${parent.id}`
    return rows[0]!.n === 3
  })
  const rows =
    await gw.sql`select status_class::int, requests::int from usage_daily where tenant_id = ${parent.id} order by 1`
  // Both went to the upstream (the upload's head and its first bytes, the wait whole): what was
  // served counts, as 499 (docs/api.md, "Time and connections").
  t.same(
    rows.map((row) => [row.status_class, row.requests]),
    [
      [2, 1],
      [4, 2],
    ],
    'usage has the answered request, and the two its client left as 4xx',
  )
})

t.test('slow responses still end with the route timeout (a wait is not an idle client)', async (t) => {
  const upstream = await holdingUpstream(t, { holdPrefix: '/v1/s/hold', delayMs: [0, 0] })
  const gw = await gatewayOnSharedDb(t, {
    gatewayConfig: {
      routes: [{ prefix: '/v1/s', upstream: upstream.url, timeout_ms: 400, response_idle_timeout_ms: 100 }],
    },
  })
  const parent = await gw.createParent()
  const res: RawResponse = await callAs(gw.url, parent.apiKey, { path: '/v1/s/hold' })
  checkProblem(t, res, 504, 'upstream_timeout', 'a held answer')
})

t.test('a waiter whose client hung up does not keep the connection it is given', async (t) => {
  const upstream = await startUpstream(t, (request, response, received) => {
    const ms = Number(new URL(request.url!, 'http://u').searchParams.get('ms') ?? 0)
    setTimeout(() => echo(request, response, received), ms)
  })
  const gw = await gatewayOnSharedDb(t, {
    gatewayConfig: { routes: [{ prefix: '/v1/w', upstream: upstream.url, max_connections: 1, timeout_ms: 3_000 }] },
  })
  const [a, b, c] = [await gw.createParent(), await gw.createParent(), await gw.createParent()]
  const holder = callAs(gw.url, a.apiKey, { path: '/v1/w/hold?ms=600' })
  await sleep(100)
  const gone = await openRequest(gw.port, head('GET', '/v1/w/gone', b.apiKey))
  await sleep(200)
  gone.socket.destroy()
  await sleep(50)
  const again = callAs(gw.url, b.apiKey, { path: '/v1/w/again' })
  t.equal((await holder).status, 200)
  t.equal(
    (await again).status,
    200,
    "the departed waiter gave its tenant's share back: the tenant waits again, not 429",
  )
  await sleep(100)
  const next = await callAs(gw.url, c.apiKey, { path: '/v1/w/next' })
  t.equal(next.status, 200, 'the connection handed to the departed waiter came back at once')
  t.notOk(
    upstream.received.some((r) => r.url === '/v1/w/gone'),
    'nothing was sent upstream for the client that left',
  )
})

t.test('a waiter whose client hung up gives its limits back: it was never forwarded', async (t) => {
  const upstream = await holdingUpstream(t, { holdPrefix: '/v1/l/hold', delayMs: [0, 0] })
  const gw = await gatewayOnSharedDb(t, {
    gatewayConfig: { routes: [{ prefix: '/v1/l', upstream: upstream.url, max_connections: 1, timeout_ms: 10_000 }] },
  })
  const [a, b] = [await gw.createParent(), await gw.createParent()]
  const sub = await subAccountVia(gw.url, b.apiKey, 'three a minute', { rate: { requests: 3, per_seconds: 60 } })
  const holder = callAs(gw.url, a.apiKey, { path: '/v1/l/hold' })
  await waitFor(() => upstream.held() === 1)
  const gone = await openRequest(gw.port, head('GET', '/v1/l/gone', b.apiKey, [`X-Service-Acting-Tenant: ${sub}`]))
  await waitFor(
    async () => (await metricValue(gw.app, 'tgw_proxy_upstream_slots', { route: '/v1/l', state: 'waiting' })) === 1,
  )
  gone.socket.destroy()
  await waitFor(
    async () => (await metricValue(gw.app, 'tgw_proxy_upstream_slots', { route: '/v1/l', state: 'waiting' })) === 0,
  )
  upstream.release()
  t.equal((await holder).status, 200)
  const statuses: number[] = []
  for (let i = 0; i < 4; i++)
    statuses.push((await callAs(gw.url, b.apiKey, { path: '/v1/l/next', acting: sub })).status)
  // Before the steps, the departed waiter kept the unit it was charged: 200, 200, 429, 429.
  t.same(statuses, [200, 200, 200, 429], 'the three a minute are whole: the departed waiter gave its unit back')
  t.notOk(
    upstream.received.some((r) => r.url === '/v1/l/gone'),
    'nothing was sent upstream for the client that left',
  )
})

t.test('a client that hangs up before the headers keeps its slot until the upstream settles', async (t) => {
  // The upstream counts the requests it holds at once: the route allows one.
  let open = 0
  let most = 0
  const upstream = await startUpstream(t, (request, response, received) => {
    open++
    most = Math.max(most, open)
    response.once('close', () => open--)
    const ms = Number(new URL(request.url!, 'http://u').searchParams.get('ms') ?? 0)
    setTimeout(() => echo(request, response, received), ms)
  })
  const gw = await gatewayOnSharedDb(t, {
    gatewayConfig: {
      routes: [{ prefix: '/v1/p', upstream: upstream.url, public: true, max_connections: 1, timeout_ms: 1_000 }],
    },
  })
  const departed: Promise<void>[] = []
  for (let i = 0; i < 5; i++) {
    const gone = await openRequest(gw.port, head('GET', `/v1/p/slow-${i}?ms=1500`, 'unused'))
    await sleep(100)
    gone.socket.destroy()
    departed.push(gone.closed)
    await sleep(50)
  }
  const started = performance.now()
  const res = await callAs(gw.url, null, { path: '/v1/p/fast' })
  const took = performance.now() - started
  t.ok([200, 503].includes(res.status), `answered ${res.status}`)
  t.ok(
    took < 2_500,
    `within the route's bound on waiting, not behind the departed clients' requests: ${Math.round(took)} ms`,
  )
  await Promise.all(departed)
  t.equal(most, 1, 'the upstream never held more requests than max_connections')
})

/**
 * How many bytes loopback takes from a writer whose reader reads nothing (both sockets' kernel
 * buffers): a response about that size is ended by the gateway with bytes it cannot flush.
 */
async function loopbackBufferBytes(): Promise<number> {
  const server = createNetServer()
  const taken = new Promise<number>((resolve) => {
    server.once('connection', (socket) => {
      // Small writes: a write counts as done only once the kernel has taken all of it.
      const chunk = Buffer.alloc(4 * 1024)
      for (let i = 0; i < 2048; i++) socket.write(chunk)
      setTimeout(() => {
        resolve(socket.bytesWritten - socket.writableLength)
        socket.destroy()
      }, 500)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const reader = connect((server.address() as AddressInfo).port, '127.0.0.1')
  reader.pause()
  const bytes = await taken
  reader.destroy()
  server.close()
  return bytes
}

t.test('an unread answer the upstream sent whole gives its slot back', async (t) => {
  const upstream = await startUpstream(t, (request, response) => {
    const size = Number(new URL(request.url!, 'http://u').searchParams.get('size') ?? 1)
    response.writeHead(200, { 'content-length': String(size) })
    response.end(Buffer.alloc(size, 'k'))
  })
  // Sizes around the loopback buffers, 2 KiB apart: under them all is flushed and nothing held;
  // a little over, the gateway has ended the response with bytes waiting for a client that reads
  // nothing. The buffers' size moves a little from one connection to the next, hence a range,
  // each size on a route of its own with one slot.
  const buffered = await loopbackBufferBytes()
  t.comment(`loopback buffers hold ${buffered} bytes`)
  const sizes = Array.from({ length: 65 }, (_, i) => buffered + (i - 32) * 2 * 1024)
  const route = (i: number) => ({
    prefix: `/v1/k${i}`,
    upstream: upstream.url,
    public: true,
    max_connections: 1,
    // Long enough for a loaded machine's upstream to answer the next request (a 504 then would
    // say nothing of slots); the idle timeout is what ends the unread answers.
    timeout_ms: 10_000,
    response_idle_timeout_ms: 300,
  })
  const gw = await gatewayOnSharedDb(t, { gatewayConfig: { routes: sizes.map((_, i) => route(i)) } })
  const unread = await Promise.all(
    sizes.map((size, i) =>
      openRequest(gw.port, head('GET', `/v1/k${i}/big?size=${size}`, 'unused'), { reading: false }),
    ),
  )
  t.teardown(() => closeAll(unread))
  // Each unread answer ends once its client has read nothing for response_idle_timeout_ms, or
  // sooner when it was flushed whole; either way its route's slot comes back. Waited for on the
  // slots themselves, not a clock: on a loaded machine the timers fire late.
  const held = async () => {
    let sum = 0
    for (let i = 0; i < sizes.length; i++)
      sum += await metricValue(gw.app, 'tgw_proxy_upstream_slots', { route: `/v1/k${i}`, state: 'held' })
    return sum
  }
  await waitFor(async () => (await held()) === 0, 30_000)
  const next = await Promise.all(sizes.map((_, i) => callAs(gw.url, null, { path: `/v1/k${i}/small?size=10` })))
  t.same(
    sizes.flatMap((size, i) =>
      next[i]!.status === 200 ? [] : [`${size} bytes: ${next[i]!.status} ${next[i]!.body.slice(0, 80)}`],
    ),
    [],
    "every route's one slot is free again, whatever the size of its unread answer",
  )
})

t.test('a pipelined request does not inherit the response idle timeout of the one before it', async (t) => {
  const upstream = await startUpstream(t, (request, response, received) => {
    const ms = Number(new URL(request.url!, 'http://u').searchParams.get('ms') ?? 0)
    setTimeout(() => echo(request, response, received), ms)
  })
  const gw = await gatewayOnSharedDb(t, {
    gatewayConfig: {
      routes: [{ prefix: '/v1/pl', upstream: upstream.url, public: true, response_idle_timeout_ms: 300 }],
    },
  })
  const both = [
    'GET /v1/pl/a HTTP/1.1\r\nHost: gw\r\n\r\n',
    'GET /v1/pl/b?ms=1000 HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n',
  ].join('')
  const exchange = await openRequest(gw.port, both)
  await orTimeout(exchange.closed, 5_000, null)
  t.equal(exchange.answered().match(/HTTP\/1\.1 200 /g)?.length, 2, 'both pipelined requests were answered 200')
})

t.test('an answer queued behind a slow one the client reads is not cut off as unread', async (t) => {
  // /slow streams for 1.2 s; /fast's answer, streamed in 0.6 s, waits behind it on the connection
  // (HTTP/1.1 pipelining), its bytes held with no socket of its own: far past the idle timeout.
  const upstream = await startUpstream(t, (request, response) => {
    response.writeHead(200, { 'content-type': 'text/plain' })
    const [letter, size, everyMs] = request.url!.includes('/fast') ? ['f', 100, 100] : ['s', 10, 150]
    let pieces = 0
    const timer = setInterval(() => {
      response.write(letter.repeat(size))
      if (++pieces === (letter === 'f' ? 6 : 8)) {
        clearInterval(timer)
        response.end()
      }
    }, everyMs)
  })
  const gw = await gatewayOnSharedDb(t, {
    gatewayConfig: {
      routes: [{ prefix: '/v1/queued', upstream: upstream.url, public: true, response_idle_timeout_ms: 300 }],
    },
  })
  const cut = () => metricValue(gw.app, 'tgw_client_aborts_total', { reason: 'stopped_reading' })
  const cutBefore = await cut()
  const exchange = await openRequest(
    gw.port,
    'GET /v1/queued/slow HTTP/1.1\r\nHost: gw\r\n\r\nGET /v1/queued/fast HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n',
  )
  await orTimeout(exchange.closed, 10_000, null)
  const answered = exchange.answered()
  t.equal(answered.match(/HTTP\/1\.1 200 /g)?.length, 2, 'both answered 200')
  // A body's bytes, whatever its chunks: the headers hold no ten of a letter in a row.
  const body = (letter: string) => (answered.match(new RegExp(`${letter}{10,}`, 'g')) ?? []).join('').length
  t.equal(body('s'), 80, 'the slow answer whole')
  t.equal(body('f'), 600, 'the queued answer whole')
  t.equal(await cut(), cutBefore, 'no client counted as one that stopped reading')
})

t.test('Expect other than 100-continue, or on HTTP/1.0: no 100, no bare 417, the usual checks', async (t) => {
  const upstream = await startUpstream(t)
  const gw = await gatewayOnSharedDb(t, { gatewayConfig: { routes: [{ prefix: '/v1/e', upstream: upstream.url }] } })
  const parent = await gw.createParent()
  const ask = async (version: string, expect: string, key: string) => {
    const request = await openRequest(
      gw.port,
      [
        `POST /v1/e/x HTTP/${version}`,
        'Host: gw',
        'Connection: close',
        `Expect: ${expect}`,
        `Authorization: Bearer ${key}`,
        'Content-Length: 2',
        '',
        'ok',
      ].join('\r\n'),
    )
    await orTimeout(request.closed, 5_000, null)
    return request.answered()
  }
  const old = await ask('1.0', '100-continue', parent.apiKey)
  t.match(old, /^HTTP\/1\.1 200 /, 'HTTP/1.0 with 100-continue: answered, with no 100 first')
  const odd = await ask('1.1', 'something-else', 'tgw_unknown')
  t.match(odd, /^HTTP\/1\.1 401 /, 'an unknown expectation: the usual 401, not a bare 417')
  t.match(odd, /"request_id"/, 'in problem+json')
  const oddGood = await ask('1.1', 'something-else', parent.apiKey)
  t.match(oddGood, /^HTTP\/1\.1 200 /, 'and with a good key, proxied')
  t.notOk(
    upstream.received.some((r) => r.headers.expect !== undefined),
    'no Expect ever reaches the upstream',
  )
})
