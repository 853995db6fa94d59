// WebSockets through the gateway (docs/api.md, WebSockets): real `ws` clients and servers over real
// sockets, Postgres and Redis. The upgrade passes the same steps as any proxied request (the
// upstream sees the trusted headers on its upgrade), every refusal is an HTTP answer on a
// connection that then closes, the browser's subprotocol credential never reaches the upstream or
// the logs, and the open sockets are governed: a cap per tenant, an idle timeout, a message size
// (1009), the shutdown (1001), and nothing left behind by an end that vanishes mid-frame.
import { connect, createServer } from 'node:net'
import pino from 'pino'
import t from 'tap'
import { loggerOptions } from '../../src/ops/logging.js'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { sleep, until } from '../helpers/poll.js'
import { clientKey } from '../helpers/tokens.js'
import { listenOnLoopback, REFUSED_URL, startUpstream } from '../helpers/upstream.js'
import { openSocket, answerToUpgrade, startWebSocketUpstream, type WebSocketUpstream } from '../helpers/websocket.js'

const written: string[] = []
const logger = pino(loggerOptions('trace'), { write: (line: string) => written.push(line) })

const upstream = await startWebSocketUpstream(t, {
  // Picks the last one offered, so that the client's answer is visibly the upstream's choice.
  handleProtocols: (protocols) => [...protocols].at(-1) ?? false,
})
const greeter = await startWebSocketUpstream(t, { greeting: 'x'.repeat(2048) })
// An HTTP server that answers every upgrade with 404: an upstream that refuses it.
const refusing = await startUpstream(t, (_request, response) => response.writeHead(404).end())
// A TCP server that takes connections and never says a word: an upstream that does not answer.
const mute = createServer(() => {})
const { port: mutePort } = await listenOnLoopback(t, mute)

function routes(up: WebSocketUpstream, big: WebSocketUpstream) {
  return [
    {
      prefix: '/live',
      upstream: up.url,
      websocket: true,
      scopes: { read: ['live:read'] },
      max_websockets_per_tenant: 3,
    },
    { prefix: '/plain', upstream: up.url, scopes: { read: ['live:read'] } },
    {
      prefix: '/small',
      upstream: up.url,
      websocket: true,
      websocket_max_message_bytes: 1024,
      websocket_idle_timeout_ms: 400,
    },
    { prefix: '/greets', upstream: big.url, websocket: true, websocket_max_message_bytes: 4096 },
    { prefix: '/greets-big', upstream: big.url, websocket: true, websocket_max_message_bytes: 1024 },
    { prefix: '/signed', upstream: up.url, websocket: true, identity: { audience: 'https://live.internal' } },
    { prefix: '/dead', upstream: REFUSED_URL, websocket: true },
    { prefix: '/refusing', upstream: refusing.url, websocket: true },
    { prefix: '/mute', upstream: `http://127.0.0.1:${mutePort}`, websocket: true, timeout_ms: 300 },
  ]
}

const gw = await startGateway(t, { logger, gatewayConfig: { routes: routes(upstream, greeter) } })
const parent = await gw.createParent()
const reader = await gw.createParent({ scopes: ['live:read'] })
const open = (route: string) => metricValue(gw.app, 'tgw_websockets_open', { route })
const problem = (body: string) => JSON.parse(body) as { code: string; status: number }

t.test('an echo through the gateway; the upstream sees the trusted headers on its upgrade', async (t) => {
  const before = upstream.upgrades.length
  const socket = await openSocket(t, `${gw.url}/live/feed?x=1`, {
    key: reader.apiKey,
    headers: { 'x-service-resolved-tenant': 'forged', 'x-request-id': 'ws-echo-1' },
  })
  socket.ws.send('hello')
  t.equal(await socket.next(), 'hello', 'text echoed')
  socket.ws.send(Buffer.from([1, 2, 3]))
  t.same([...Buffer.from(await socket.next())], [1, 2, 3], 'binary echoed')
  t.equal(upstream.upgrades.length, before + 1, 'one upgrade reached the upstream')
  const headers = upstream.upgrades.at(-1)!
  t.match(headers, {
    'x-service-resolved-tenant': reader.id,
    'x-service-caller-tenant': reader.id,
    'x-service-key-id': reader.keyId,
    'x-service-scopes': 'live:read',
    'x-request-id': 'ws-echo-1',
  })
  t.notOk('authorization' in headers, 'the key is not forwarded')
  t.equal(await open('/live'), 1, 'tgw_websockets_open{route="/live"} is 1')
  socket.ws.close(1000, 'bye')
  t.match(await socket.closed, { code: 1000, reason: 'bye' }, "the client's close comes back")
  t.ok(await until(2000, async () => (await open('/live')) === 0), 'the gauge is back to 0')
  t.ok(await until(2000, async () => upstream.open() === 0), "the upstream's socket closed too")
})

t.test('on a route with identity, the upgrade carries X-Service-Identity too', async (t) => {
  const socket = await openSocket(t, `${gw.url}/signed/feed`, { key: reader.apiKey })
  const identity = upstream.upgrades.at(-1)!['x-service-identity']
  t.match(identity, /^[\w-]+\.[\w-]+\.[\w-]+$/, 'a signed assertion')
  const claims = JSON.parse(Buffer.from(String(identity).split('.')[1]!, 'base64url').toString()) as Record<
    string,
    unknown
  >
  t.match(claims, { aud: 'https://live.internal', sub: reader.id, key_id: reader.keyId })
  socket.ws.close()
})

t.test('what the upstream sends on open is not lost while the client is answered', async (t) => {
  const socket = await openSocket(t, `${gw.url}/greets`, { key: parent.apiKey })
  t.equal((await socket.next()).length, 2048, 'the greeting arrives')
  socket.ws.close()
})

t.test("the upgrade counts as a request: the month's use and the request line", async (t) => {
  const fresh = await gw.createParent()
  const used = async () =>
    (await callAs(gw.url, fresh.apiKey, { path: '/v1/sub-accounts/limits', acting: 'self' })).json().used as number
  const socket = await openSocket(t, `${gw.url}/greets/usage`, { key: fresh.apiKey })
  socket.ws.close()
  t.ok(await until(4000, async () => (await used()) === 1), "one of the month's requests")
  const line = written.find((l) => l.includes('"msg":"request"') && l.includes('/greets/usage'))
  t.match(line, /"status":101/, 'a request line with status 101')
})

/** Handshakes that ws's server refuses: a subprotocol list it cannot read, an Upgrade that is a list. */
const BAD_HANDSHAKES: [string, Record<string, string>][] = [
  ['a subprotocol offered twice', { 'sec-websocket-protocol': 'chat, chat' }],
  ['a subprotocol with a space', { 'sec-websocket-protocol': 'a b' }],
  ['a subprotocol with a slash', { 'sec-websocket-protocol': 'chat, a/b' }],
  ['a quoted subprotocol', { 'sec-websocket-protocol': '"x"' }],
  ['an empty subprotocol entry', { 'sec-websocket-protocol': 'a,,b' }],
  ['a credential entry with a space', { 'sec-websocket-protocol': 'tgw.bearer.x y, chat' }],
  ['Upgrade as a list', { upgrade: 'foo, websocket' }],
]

t.test('each refusal is an HTTP answer (problem+json), and the connection closes', async (t) => {
  const client = await clientKey(gw.url, parent, ['live:read'])
  const cases: [string, string, Record<string, string>, number, string][] = [
    ['no key', '/live/x', {}, 401, 'unauthenticated'],
    ['a wrong key', '/live/x', { authorization: 'Bearer tgw_nope' }, 401, 'unauthenticated'],
    ['no read scope', '/live/x', { authorization: `Bearer ${parent.apiKey}` }, 403, 'insufficient_scope'],
    [
      'a route without websocket: true',
      '/plain/x',
      { authorization: `Bearer ${reader.apiKey}` },
      400,
      'websocket_not_enabled',
    ],
    // Once the key is known: a stranger learns nothing of the route.
    ['a route without websocket: true, no key', '/plain/x', {}, 401, 'unauthenticated'],
    ['another protocol', '/live/x', { authorization: `Bearer ${reader.apiKey}`, upgrade: 'h2c' }, 400, 'bad_request'],
    [
      'a bad version',
      '/live/x',
      { authorization: `Bearer ${reader.apiKey}`, 'sec-websocket-version': '8' },
      400,
      'bad_request',
    ],
    // What ws would refuse once the upstream's socket is open is refused before it is dialled.
    ...BAD_HANDSHAKES.map(([what, headers]): [string, string, Record<string, string>, number, string] => [
      what,
      '/live/x',
      { authorization: `Bearer ${reader.apiKey}`, ...headers },
      400,
      'bad_request',
    ]),
  ]
  const off = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: `/v1/sub-accounts/${client.subId}/deactivate`,
    acting: 'self',
  })
  t.equal(off.status, 200, 'a sub-account deactivated')
  cases.push([
    'an unreachable upstream',
    '/dead/x',
    { authorization: `Bearer ${parent.apiKey}` },
    502,
    'upstream_unavailable',
  ])
  cases.push([
    'an upstream that refuses',
    '/refusing/x',
    { authorization: `Bearer ${parent.apiKey}` },
    502,
    'upstream_unavailable',
  ])
  cases.push([
    'an upstream that does not answer',
    '/mute/x',
    { authorization: `Bearer ${parent.apiKey}` },
    504,
    'upstream_timeout',
  ])
  cases.push([
    'a deactivated tenant',
    '/live/x',
    { authorization: `Bearer ${client.apiKey}` },
    403,
    'tenant_deactivated',
  ])
  for (const [what, path, headers, status, code] of cases) {
    const answer = await answerToUpgrade(`${gw.url}${path}`, headers)
    t.equal(answer.status, status, `${what}: ${status}`)
    t.match(answer.headers['content-type'], /^application\/problem\+json/, `${what}: problem+json`)
    t.equal(problem(answer.body).code, code, `${what}: ${code}`)
    t.equal(answer.headers.connection, 'close', `${what}: Connection: close`)
    t.ok(answer.ended, `${what}: the connection is closed after the answer`)
  }
  t.equal(await open('/live'), 0, 'nothing opened')
})

// Without a route that carries WebSockets Node flags no upgrade and hands none to http-proxy:
// the refusal's own Connection: close is what ends the connection.
t.test('a gateway with no WebSocket route refuses an upgrade, and closes its connection', async (t) => {
  const before = upstream.upgrades.length
  const plainOnly = await startGateway(t, {
    database: gw.database,
    gatewayConfig: { routes: [{ prefix: '/plain', upstream: upstream.url, scopes: { read: ['live:read'] } }] },
  })
  const cases: [string, Record<string, string>, number, string][] = [
    ['with a key', { authorization: `Bearer ${reader.apiKey}` }, 400, 'websocket_not_enabled'],
    ['without a key', {}, 401, 'unauthenticated'],
  ]
  for (const [what, headers, status, code] of cases) {
    const answer = await answerToUpgrade(`${plainOnly.url}/plain/x`, headers)
    t.equal(answer.status, status, `${what}: ${status}`)
    t.equal(problem(answer.body).code, code, `${what}: ${code}`)
    t.equal(answer.headers.connection, 'close', `${what}: Connection: close`)
    t.ok(answer.ended, `${what}: the gateway closed the connection`)
  }
  t.equal(upstream.upgrades.length, before, 'the upstream saw no upgrade')
  // Node hands a request to 'upgrade' listeners whenever there is one: none may be there.
  const h2c = await answerToUpgrade(`${plainOnly.url}/healthz`, { upgrade: 'h2c' })
  t.equal(h2c.status, 200, 'an upgrade to another protocol is answered as HTTP/1.1')
})

// http-proxy destroys the socket of every upgrade Node hands it once the answer is sent, whatever
// the answer: one that is no refusal must not promise keep-alive either.
t.test('an upgrade answered by a redirect or a management 200 says Connection: close', async (t) => {
  const cases: [string, string, Record<string, string>, number][] = [
    ['the health check', '/healthz', {}, 200],
    ['a management read', '/v1/sub-accounts', { authorization: `Bearer ${parent.apiKey}` }, 200],
    ["the console's redirect", '/console/', {}, 308],
  ]
  for (const [what, path, headers, status] of cases) {
    const answer = await answerToUpgrade(`${gw.url}${path}`, headers)
    t.equal(answer.status, status, `${what}: ${status}`)
    t.equal(answer.headers.connection, 'close', `${what}: Connection: close`)
    t.ok(answer.ended, `${what}: the connection is closed after the answer`)
  }
})

t.test('the rate limit refuses an upgrade as any request: 429 rate_limited', async (t) => {
  const client = await clientKey(gw.url, parent, ['live:read'])
  const limits = await callAs(gw.url, parent.apiKey, {
    method: 'PATCH',
    path: `/v1/sub-accounts/${client.subId}`,
    acting: 'self',
    json: { limits: { rate: { requests: 1, per_seconds: 3600 }, monthly_quota: null } },
  })
  t.equal(limits.status, 200, 'a rate of 1 an hour')
  const first = await openSocket(t, `${gw.url}/live/x`, { key: client.apiKey })
  const answer = await answerToUpgrade(`${gw.url}/live/x`, { authorization: `Bearer ${client.apiKey}` })
  t.equal(answer.status, 429)
  t.equal(problem(answer.body).code, 'rate_limited')
  first.ws.close()
})

t.test('an IP allow-list refuses an upgrade as any request: 403 ip_not_allowed', async (t) => {
  const client = await clientKey(gw.url, parent, ['live:read'])
  const walled = await callAs(gw.url, parent.apiKey, {
    method: 'PATCH',
    path: `/v1/sub-accounts/${client.subId}`,
    acting: 'self',
    json: { key_policy: { ip_allowlist: ['127.0.0.9'] } },
  })
  t.equal(walled.status, 200, 'the sub-account allows 127.0.0.9 only')
  const answer = await answerToUpgrade(`${gw.url}/live/x`, { authorization: `Bearer ${client.apiKey}` })
  t.equal(answer.status, 403)
  t.equal(problem(answer.body).code, 'ip_not_allowed')
  t.ok(answer.ended, 'the connection is closed after the answer')
  const opened = await callAs(gw.url, parent.apiKey, {
    method: 'PATCH',
    path: `/v1/sub-accounts/${client.subId}`,
    acting: 'self',
    json: { key_policy: { ip_allowlist: ['127.0.0.0/8'] } },
  })
  t.equal(opened.status, 200)
  const socket = await openSocket(t, `${gw.url}/live/x`, { key: client.apiKey })
  t.ok(socket.ws.readyState === socket.ws.OPEN, 'within the list, it opens')
  socket.ws.close()
})

t.test('max_websockets_per_tenant: past it 429, and a closed socket frees its place', async (t) => {
  const sockets = await Promise.all([1, 2, 3].map(() => openSocket(t, `${gw.url}/live/cap`, { key: reader.apiKey })))
  const answer = await answerToUpgrade(`${gw.url}/live/cap`, { authorization: `Bearer ${reader.apiKey}` })
  t.equal(answer.status, 429, 'the fourth is refused')
  t.equal(problem(answer.body).code, 'too_many_concurrent_requests')
  t.equal(answer.headers['retry-after'], '1')
  sockets[0]!.ws.close()
  await sockets[0]!.closed
  const again = await until(2000, async () => {
    try {
      sockets[0] = await openSocket(t, `${gw.url}/live/cap`, { key: reader.apiKey })
      return true
    } catch {
      return false
    }
  })
  t.ok(again, 'a place freed by a close is taken again')
  for (const socket of sockets) socket.ws.close()
  await Promise.all(sockets.map((socket) => socket.closed))
  t.ok(await until(2000, async () => (await open('/live')) === 0), 'all closed')
})

t.test('a handshake refused before the upstream takes no place under the cap, and dials nothing', async (t) => {
  const dialled = upstream.upgrades.length
  // Twice the cap (3) of each: had any held a place, the upgrade after them would get 429.
  for (const [what, headers] of BAD_HANDSHAKES) {
    for (let i = 0; i < 6; i++) {
      const answer = await answerToUpgrade(`${gw.url}/live/cap`, {
        authorization: `Bearer ${reader.apiKey}`,
        ...headers,
      })
      if (answer.status !== 400) t.fail(`${what}: ${answer.status} ${answer.body}`)
    }
  }
  const detail = (headers: Record<string, string>) =>
    answerToUpgrade(`${gw.url}/live/cap`, { authorization: `Bearer ${reader.apiKey}`, ...headers }).then(
      (answer) => (JSON.parse(answer.body) as { detail: string }).detail,
    )
  t.match(await detail({ 'sec-websocket-protocol': 'chat, tgw.bearer.k, chat' }), /entry 3 repeats entry 1/)
  const secret = await detail({ 'sec-websocket-protocol': 'chat, tgw.bearer.secret value' })
  t.match(secret, /entry 2 is not a subprotocol name/, 'the entry told by its place')
  t.notMatch(secret, /secret/, 'and never quoted: it may be a credential')
  t.equal(upstream.upgrades.length, dialled, 'the upstream was never dialled')
  const sockets = await Promise.all([1, 2, 3].map(() => openSocket(t, `${gw.url}/live/cap`, { key: reader.apiKey })))
  t.equal(sockets.length, 3, 'the cap is whole: three sockets open')
  for (const socket of sockets) socket.ws.close()
  await Promise.all(sockets.map((socket) => socket.closed))
  t.ok(await until(2000, async () => (await open('/live')) === 0), 'all closed')
})

t.test('the browser credential: a subprotocol, stripped before the upstream, never logged', async (t) => {
  const socket = await openSocket(t, `${gw.url}/live/browser`, {
    protocols: [`tgw.bearer.${reader.apiKey}`, 'chat.v2', 'chat.v1'],
  })
  t.equal(socket.ws.protocol, 'chat.v1', "the client gets the upstream's choice")
  const headers = upstream.upgrades.at(-1)!
  t.equal(headers['sec-websocket-protocol'], 'chat.v2,chat.v1', 'the upstream is offered the rest')
  t.equal(headers['x-service-key-id'], reader.keyId, 'the subprotocol authenticated the upgrade')
  t.notOk('authorization' in headers, 'and is not forwarded as Authorization')
  t.notOk(JSON.stringify(headers).includes(reader.apiKey), 'the upstream never sees the key')
  socket.ws.send('ping?')
  t.equal(await socket.next(), 'ping?')
  socket.ws.close()

  const alone = await openSocket(t, `${gw.url}/live/browser`, { protocols: [`tgw.bearer.${reader.apiKey}`] })
  t.equal(alone.ws.protocol, `tgw.bearer.${reader.apiKey}`, 'offered alone, it is the answer (a browser needs one)')
  t.notOk('sec-websocket-protocol' in upstream.upgrades.at(-1)!, 'the upstream is offered none')
  alone.ws.close()

  const twice = await answerToUpgrade(`${gw.url}/live/browser`, {
    'sec-websocket-protocol': `tgw.bearer.${reader.apiKey}, tgw.bearer.${parent.apiKey}`,
  })
  t.equal(twice.status, 401, 'two credentials: 401')
  await sleep(50)
  t.notOk(
    written.some((line) => line.includes(reader.apiKey)),
    'no log line holds the key',
  )
})

t.test('websocket_idle_timeout_ms: no frame for that long closes; pings count as frames', async (t) => {
  const pinged = await openSocket(t, `${gw.url}/small/idle`, { key: parent.apiKey })
  const idle = await openSocket(t, `${gw.url}/small/idle`, { key: parent.apiKey })
  const started = performance.now()
  const timer = setInterval(() => pinged.ws.ping(), 100)
  const closed = await idle.closed
  t.match(closed, { code: 1001, reason: 'idle timeout' }, 'the idle socket closes with 1001')
  t.ok(closed.at - started >= 350, `not before the timeout (${Math.round(closed.at - started)} ms)`)
  t.equal(pinged.ws.readyState, pinged.ws.OPEN, 'the pinged one is open')
  clearInterval(timer)
  t.match(await pinged.closed, { code: 1001 }, 'and closes once the pings stop')
})

t.test('websocket_max_message_bytes: a message over it closes with 1009, either way', async (t) => {
  const socket = await openSocket(t, `${gw.url}/small/size`, { key: parent.apiKey })
  socket.ws.send('y'.repeat(1000))
  t.equal((await socket.next()).length, 1000, 'under the bound: echoed')
  socket.ws.send('y'.repeat(2000))
  t.match(await socket.closed, { code: 1009 }, 'the client sent too much: 1009')
  const fromUpstream = await openSocket(t, `${gw.url}/greets-big`, { key: parent.apiKey })
  t.match(await fromUpstream.closed, { code: 1009 }, 'the upstream sent too much: 1009')
  t.ok(await until(2000, async () => (await open('/small')) + (await open('/greets-big')) === 0), 'gauges at 0')
})

t.test('an end that vanishes mid-frame leaves nothing open', async (t) => {
  // The client: a handshake by hand, then half a frame, then the connection is cut.
  const raw = connect(gw.port, '127.0.0.1')
  raw.write(
    [
      'GET /small/vanish HTTP/1.1',
      `Host: 127.0.0.1:${gw.port}`,
      'Connection: Upgrade',
      'Upgrade: websocket',
      'Sec-WebSocket-Version: 13',
      'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==',
      `Authorization: Bearer ${parent.apiKey}`,
      '',
      '',
    ].join('\r\n'),
  )
  await new Promise((resolve) => raw.once('data', resolve))
  t.equal(await open('/small'), 1, 'open')
  // A masked text frame announcing 100 bytes, of which 10 come.
  raw.write(Buffer.concat([Buffer.from([0x81, 0x80 | 100, 1, 2, 3, 4]), Buffer.alloc(10)]))
  raw.destroy()
  t.ok(await until(2000, async () => (await open('/small')) === 0), 'the client vanished: gauge back to 0')
  t.ok(await until(2000, async () => upstream.open() === 0), "and the upstream's socket is closed")

  // The upstream: its socket is cut mid-frame.
  const socket = await openSocket(t, `${gw.url}/small/vanish`, { key: parent.apiKey })
  const theirs = upstream.sockets.at(-1)!
  const tcp = (theirs as unknown as { _socket: import('node:net').Socket })._socket
  tcp.write(Buffer.from([0x81, 100, 0, 0]))
  tcp.destroy()
  t.match(await socket.closed, { code: 1014 }, 'the client is told the upstream went away (1014)')
  t.ok(await until(2000, async () => (await open('/small')) === 0), 'gauge back to 0')
})

/** A client that completes its handshake by hand, then never reads or answers anything. */
async function deafClient(port: number, path: string, key: string): Promise<import('node:net').Socket> {
  const raw = connect(port, '127.0.0.1')
  raw.write(
    [
      `GET ${path} HTTP/1.1`,
      `Host: 127.0.0.1:${port}`,
      'Connection: Upgrade',
      'Upgrade: websocket',
      'Sec-WebSocket-Version: 13',
      'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==',
      `Authorization: Bearer ${key}`,
      '',
      '',
    ].join('\r\n'),
  )
  await new Promise((resolve) => raw.once('data', resolve))
  raw.pause()
  return raw
}

t.test('shutdown closes open sockets with 1001, and does not wait long for a deaf client', async (t) => {
  const own = await startGateway(t, { gatewayConfig: { routes: routes(upstream, greeter) } })
  const key = (await own.createParent({ scopes: ['live:read'] })).apiKey
  const socket = await openSocket(t, `${own.url}/live/bye`, { key })
  const deaf = await deafClient(own.port, '/live/deaf', key)
  t.teardown(() => deaf.destroy())
  const started = performance.now()
  await own.close()
  const took = performance.now() - started
  t.match(await socket.closed, { code: 1001, reason: 'going away' })
  t.ok(took < 10_000, `closed in ${Math.round(took)} ms, not after ws's 30 s wait for the deaf one`)
})
