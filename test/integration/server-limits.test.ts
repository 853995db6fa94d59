// The server's own limits (docs/api.md, docs/configuration.md), over real sockets: a request head
// must arrive within its deadline (408), an idle keep-alive connection closes after 72 s (Node
// says so in Keep-Alive), the gateway holds at most MAX_CONNECTIONS client connections (a new one
// at the limit closes idle keep-alive ones to make room, never busy ones), and a management body
// that does not arrive in time is 408 request_timeout, not 503 store_unavailable.
import { connect, type Socket } from 'node:net'
import t from 'tap'
import {
  evictionBatch,
  HEADERS_TIMEOUT_MS,
  KEEP_ALIVE_TIMEOUT_MS,
  serverOptions,
} from '../../src/http/server-limits.js'
import { startGateway, type TestGateway } from '../helpers/gateway.js'
import { parseResponses, problemIssue, rawExchange, requestBytes } from '../helpers/hostile.js'
import { until } from '../helpers/poll.js'
import { holdingUpstream } from '../helpers/upstream.js'
import { openSocket, startWebSocketUpstream } from '../helpers/websocket.js'

/** A socket's whole story: what the server sent, and when it closed, in ms after `connectedAt`. */
interface Watched {
  socket: Socket
  connectedAt: number
  received: () => Buffer
  closed: Promise<number>
}

function watch(port: number): Promise<Watched> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1')
    const chunks: Buffer[] = []
    let connectedAt = 0
    const closed = new Promise<number>((done) => socket.on('close', () => done(performance.now() - connectedAt)))
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    socket.on('error', () => {})
    socket.once('connect', () => {
      connectedAt = performance.now()
      resolve({ socket, connectedAt, received: () => Buffer.concat(chunks), closed })
    })
    socket.once('error', reject)
  })
}

/** Until the connection closes or `limitMs` passes: how long it took to close, or null if it did not. */
async function closedWithin(watched: Watched, limitMs: number): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined
  const gaveUp = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), limitMs)
  })
  try {
    return await Promise.race([watched.closed, gaveUp])
  } finally {
    clearTimeout(timer)
    watched.socket.destroy()
  }
}

/** Writes `text` one character every `everyMs`, until the socket closes or the text ends. */
async function trickle(socket: Socket, text: string, everyMs: number): Promise<void> {
  for (const char of text) {
    if (socket.destroyed || !socket.writable) return
    socket.write(char)
    await new Promise((resolve) => setTimeout(resolve, everyMs))
  }
}

t.test('the default deadlines and keep-alive are what docs/api.md says', async (t) => {
  t.equal(HEADERS_TIMEOUT_MS, 10_000)
  t.same(serverOptions(HEADERS_TIMEOUT_MS), {
    headersTimeout: 10_000,
    connectionsCheckingInterval: 1_000,
    maxHeaderSize: 16 * 1024,
    // The request guards answer a missing Host, in problem+json (http/guards.ts).
    requireHostHeader: false,
  })
  const gw = await startGateway(t, { redis: false })
  t.equal(gw.app.server.headersTimeout, 10_000, "the server's head deadline")
  t.equal(gw.app.server.keepAliveTimeout, 72_000, "the server's keep-alive timeout")
  t.equal(KEEP_ALIVE_TIMEOUT_MS, 72_000)
  t.equal(gw.app.server.maxConnections, 10_001, "MAX_CONNECTIONS defaults to 10,000 (Node's limit one above)")
  const { responses } = await rawExchange(
    gw.port,
    requestBytes({ method: 'GET', target: '/healthz', headers: [['Host', 'x']] }),
    { until: 1 },
  )
  t.equal(responses[0]?.status, 200)
  t.equal(responses[0]?.header('keep-alive'), 'timeout=72', 'Keep-Alive: timeout=72')
})

t.test('a head that never completes is answered 408 request_timeout and closed, at its deadline', async (t) => {
  const gw = await startGateway(t, { redis: false, headersTimeoutMs: 1_000 })
  const watched = await watch(gw.port)
  // A header byte every 100 ms: the connection is never idle, the head never ends.
  void trickle(watched.socket, `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ${'a'.repeat(200)}`, 100)
  const closedAfter = await closedWithin(watched, 4_000)
  t.ok(
    closedAfter !== null && closedAfter >= 900,
    `closed ${closedAfter === null ? 'not within 4 s' : `${Math.round(closedAfter)} ms`} after connecting (deadline 1 s)`,
  )
  const { responses } = parseResponses(watched.received())
  t.equal(responses.length, 1, 'one answer')
  const res = responses[0]
  t.equal(res?.status, 408)
  if (res !== undefined) t.equal(problemIssue(res, { status: 408, code: 'request_timeout' }), null, 'problem+json')
  t.equal(res?.header('connection'), 'close')

  // A connection that sends nothing at all is held no longer than a slow head.
  const silent = await watch(gw.port)
  const silentClosed = await closedWithin(silent, 4_000)
  t.ok(silentClosed !== null, `a silent connection is closed (${Math.round(silentClosed ?? -1)} ms)`)
  t.equal(parseResponses(silent.received()).responses[0]?.status, 408, 'with a 408')

  // Between requests a keep-alive connection is idle, not slow: the head deadline does not apply.
  const kept = await watch(gw.port)
  const health = requestBytes({ method: 'GET', target: '/healthz', headers: [['Host', 'x']] })
  kept.socket.write(health)
  await new Promise((resolve) => setTimeout(resolve, 2_500))
  t.notOk(kept.socket.destroyed, 'an idle keep-alive connection outlives the head deadline')
  kept.socket.write(health)
  await new Promise((resolve) => setTimeout(resolve, 300))
  t.same(
    parseResponses(kept.received()).responses.map((r) => r.status),
    [200, 200],
    'and serves its next request',
  )
  kept.socket.destroy()
})

/** How many client connections the gateway holds now, as Node counts them. */
function connectionsHeld(gw: TestGateway): Promise<number> {
  return new Promise((resolve, reject) =>
    gw.app.server.getConnections((err, count) => (err ? reject(err) : resolve(count))),
  )
}

const health = requestBytes({ method: 'GET', target: '/healthz', headers: [['Host', 'x']] })

t.test('MAX_CONNECTIONS: none idle, one beyond it is closed unanswered; one freed makes room', async (t) => {
  const gw = await startGateway(t, { redis: false, env: { MAX_CONNECTIONS: '3' } })
  t.equal(gw.app.server.maxConnections, 4, "Node's own limit, one above, is never reached")
  // None is idle: one has sent nothing yet, two are sending their head (10 s to finish it).
  const held: Watched[] = [await watch(gw.port)]
  for (let i = 0; i < 2; i++) {
    const watched = await watch(gw.port)
    watched.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n')
    held.push(watched)
  }
  t.ok(await until(3_000, async () => (await connectionsHeld(gw)) === 3), 'the three are held')
  const fourth = await rawExchange(gw.port, health, { until: 1, waitMs: 3_000 })
  t.equal(fourth.responses.length, 0, 'the fourth connection gets no answer')
  t.ok(fourth.closedByServer, 'and is closed by the gateway')
  t.same(
    held.map((watched) => watched.socket.closed),
    [false, false, false],
    'none of the three was closed to make room',
  )

  held[0]!.socket.destroy()
  t.ok(await until(3_000, async () => (await connectionsHeld(gw)) === 2), 'one closes')
  const after = await rawExchange(gw.port, health, { until: 1, waitMs: 3_000 })
  t.equal(after.responses[0]?.status, 200, 'once one closes, a new connection is served')
  held[1]!.socket.write('\r\n')
  t.ok(
    await until(3_000, async () => parseResponses(held[1]!.received()).complete === 1),
    'a head that was arriving is still answered',
  )
  t.equal(parseResponses(held[1]!.received()).responses[0]?.status, 200)
  for (const watched of held) watched.socket.destroy()
})

t.test('MAX_CONNECTIONS: at the limit, a new client closes idle keep-alive connections, never busy ones', async (t) => {
  const slow = await holdingUpstream(t, { holdPrefix: '/slow/', delayMs: [0, 0] })
  const live = await startWebSocketUpstream(t)
  const gw = await startGateway(t, {
    redis: false,
    env: { MAX_CONNECTIONS: '6' },
    gatewayConfig: {
      routes: [
        { prefix: '/slow', upstream: slow.url, public: true },
        { prefix: '/live', upstream: live.url, public: true, websocket: true },
      ],
    },
  })
  // Busy: an open WebSocket, and a request held in flight by its upstream.
  const socket = await openSocket(t, `${gw.url}/live`)
  const inFlight = await watch(gw.port)
  inFlight.socket.write(requestBytes({ method: 'GET', target: '/slow/x', headers: [['Host', 'x']] }))
  t.ok(await until(3_000, async () => slow.held() === 1), 'the request is held by the upstream')
  // Idle: four keep-alive connections that each sent one request, were answered, and sit.
  const idle: Watched[] = []
  for (let i = 0; i < 4; i++) {
    const watched = await watch(gw.port)
    watched.socket.write(health)
    idle.push(watched)
  }
  t.ok(
    await until(3_000, async () => idle.every((watched) => parseResponses(watched.received()).complete === 1)),
    'the four idle ones were answered',
  )
  t.equal(await connectionsHeld(gw), 6, 'the limit is reached')

  const newcomer = await rawExchange(gw.port, health, { until: 1, waitMs: 3_000 })
  t.equal(newcomer.responses[0]?.status, 200, 'a new client is served')
  t.ok(
    await until(3_000, async () => idle.some((watched) => watched.socket.closed)),
    'an idle keep-alive connection was closed to make room',
  )
  const closedIdle = idle.filter((watched) => watched.socket.closed).length
  t.ok(closedIdle <= evictionBatch(6), `${closedIdle} closed, at most a batch (${evictionBatch(6)})`)
  t.notOk(inFlight.socket.closed, 'the request in flight keeps its connection')
  t.equal(socket.ws.readyState, socket.ws.OPEN, 'the WebSocket stays open')

  slow.release()
  t.ok(
    await until(3_000, async () => parseResponses(inFlight.received()).complete === 1),
    'the request in flight completes',
  )
  t.equal(parseResponses(inFlight.received()).responses[0]?.status, 200)
  socket.ws.send('still here')
  t.equal(await socket.next(), 'still here', 'and the WebSocket still carries messages')

  // An idle connection left open serves its next request as before.
  const kept = idle.find((watched) => !watched.socket.closed)!
  kept.socket.write(health)
  t.ok(await until(3_000, async () => parseResponses(kept.received()).complete === 2), 'a kept one serves again')
  for (const watched of [inFlight, ...idle]) watched.socket.destroy()
})

t.test('a management body that arrives too slowly is 408 request_timeout, and creates nothing', async (t) => {
  const gw = await startGateway(t, { redis: false, managementBodyTimeoutMs: 1_000 })
  const parent = await gw.createParent()
  const shell = JSON.stringify({ name: 'slow', metadata: { pad: '' } })
  const body = JSON.stringify({ name: 'slow', metadata: { pad: 'x'.repeat(100 - shell.length) } })
  t.equal(Buffer.byteLength(body), 100, 'a body of 100 bytes')
  const watched = await watch(gw.port)
  const head = requestBytes({
    method: 'POST',
    target: '/v1/sub-accounts',
    headers: [
      ['Host', 'x'],
      ['Authorization', `Bearer ${parent.apiKey}`],
      ['Content-Type', 'application/json'],
      ['Content-Length', '100'],
    ],
  })
  watched.socket.write(head)
  // One byte a second: well past the store deadline (1.5 s) and the body deadline (1 s here).
  void trickle(watched.socket, body, 1_000)
  const closedAfter = await closedWithin(watched, 5_000)
  t.ok(
    closedAfter !== null,
    `closed ${closedAfter === null ? 'not within 5 s' : `${Math.round(closedAfter)} ms`} after connecting`,
  )
  const { responses } = parseResponses(watched.received())
  const res = responses[0]
  t.equal(res?.status, 408, `408, not ${res?.status} ${res?.body.slice(0, 120)}`)
  if (res !== undefined) t.equal(problemIssue(res, { status: 408, code: 'request_timeout' }), null, 'problem+json')
  t.equal(res?.header('connection'), 'close')
  const created = await gw.sql`select id from tenants where parent_id = ${parent.id}`
  t.equal(created.length, 0, 'no sub-account was created')

  // A body that arrives in time is still served, its store work under the store deadline.
  const quick = await rawExchange(
    gw.port,
    requestBytes({
      method: 'POST',
      target: '/v1/sub-accounts',
      headers: [
        ['Host', 'x'],
        ['Authorization', `Bearer ${parent.apiKey}`],
        ['Content-Type', 'application/json'],
        ['Content-Length', '100'],
      ],
      body,
    }),
    { until: 1 },
  )
  t.equal(quick.responses[0]?.status, 201)
})
