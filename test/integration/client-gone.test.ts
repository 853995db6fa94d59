// A client that leaves ends its exchange (docs/api.md, "Upstream failures": every stream
// a request starts ends with its exchange, whatever ends it first). Its upstream request goes no
// further: one already sent is aborted, so that its slot comes back at once rather than at the
// route's timeout; one whose connection to the upstream is still being made is never sent.
import { execFile } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { createServer as createHttpsServer } from 'node:https'
import { connect, createServer, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { getCACertificates, setDefaultCACertificates } from 'node:tls'
import { promisify } from 'node:util'
import t from 'tap'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { until } from '../helpers/poll.js'
import { listenOnLoopback } from '../helpers/upstream.js'

const run = promisify(execFile)
/** Far longer than the test: a slot that comes back came back because the client left. */
const ROUTE_TIMEOUT_MS = 120_000
const WAIT_LIMIT_MS = 30_000

/** Sends a request head on a raw socket and leaves it open: the test hangs up when it chooses. */
function openRequest(port: number, path: string, apiKey: string): Socket {
  const socket = connect(port, '127.0.0.1')
  socket.on('error', () => {})
  socket.write(`GET ${path} HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer ${apiKey}\r\n\r\n`)
  return socket
}

t.test('a client that leaves before the answer: its upstream request is aborted at once', async (t) => {
  // Reads the request, never answers; counts the connections the gateway closed.
  let received = 0
  let closed = 0
  const upstream = createServer((socket) => {
    socket.on('error', () => {})
    socket.once('data', () => received++)
    socket.once('close', () => closed++)
  })
  const { port } = await listenOnLoopback(t, upstream)
  const gw = await startGateway(t, {
    gatewayConfig: {
      routes: [{ prefix: '/slow', upstream: `http://127.0.0.1:${port}`, timeout_ms: ROUTE_TIMEOUT_MS }],
    },
  })
  const parent = await gw.createParent()
  const held = () => metricValue(gw.app, 'tgw_proxy_upstream_slots', { route: '/slow', state: 'held' })

  const client = openRequest(gw.port, '/slow/x', parent.apiKey)
  t.ok(await until(WAIT_LIMIT_MS, async () => received === 1), 'the request reached the upstream')
  t.equal(await held(), 1, 'and holds its slot')
  client.destroy()
  t.ok(
    await until(WAIT_LIMIT_MS, async () => (await held()) === 0 && closed === 1),
    `once the client left, the slot came back and the upstream's connection closed, long before the route's ${ROUTE_TIMEOUT_MS} ms timeout`,
  )
  t.equal(await metricValue(gw.app, 'tgw_client_aborts_total', { reason: 'hung_up' }), 1, 'counted as a client abort')
})

t.test('a client that leaves while the upstream connection is made: nothing is sent', async (t) => {
  // An https upstream, trusted by this process for the test, behind a relay that holds each
  // connection until the test lets it through: the TLS handshake, and so undici's connect,
  // waits for the test.
  const dir = await mkdtemp(join(tmpdir(), 'tgw-client-gone-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const [keyFile, certFile] = [join(dir, 'key.pem'), join(dir, 'cert.pem')]
  await run('openssl', [
    ...['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'],
    ...['-keyout', keyFile, '-out', certFile, '-days', '1', '-subj', '/CN=127.0.0.1'],
    ...['-addext', 'subjectAltName=IP:127.0.0.1'],
  ])
  const cert = await readFile(certFile, 'utf8')
  const trusted = getCACertificates('default')
  setDefaultCACertificates([...trusted, cert])
  t.teardown(() => setDefaultCACertificates(trusted))

  const received: string[] = []
  const https = createHttpsServer({ key: await readFile(keyFile), cert }, (request, response) => {
    received.push(request.url!)
    response.end('answered')
  })
  const { port: httpsPort } = await listenOnLoopback(t, https)
  const waiting: Socket[] = []
  const relay = createServer((socket) => {
    socket.on('error', () => {})
    socket.pause()
    waiting.push(socket)
  })
  const { port: relayPort } = await listenOnLoopback(t, relay)
  const letThrough = () => {
    for (const socket of waiting.splice(0)) {
      const onward = connect(httpsPort, '127.0.0.1')
      onward.on('error', () => socket.destroy())
      socket.pipe(onward).pipe(socket)
      socket.resume()
    }
  }

  const gw = await startGateway(t, {
    gatewayConfig: {
      routes: [{ prefix: '/tls', upstream: `https://127.0.0.1:${relayPort}`, timeout_ms: ROUTE_TIMEOUT_MS }],
    },
  })
  const parent = await gw.createParent()
  const held = () => metricValue(gw.app, 'tgw_proxy_upstream_slots', { route: '/tls', state: 'held' })

  // Two requests, each on a connection to the upstream that the relay holds: one client stays,
  // the other leaves before the connection is made.
  const staying = openRequest(gw.port, '/tls/staying', parent.apiKey)
  let answer = ''
  staying.on('data', (chunk: Buffer) => (answer += chunk.toString('latin1')))
  const leaving = openRequest(gw.port, '/tls/leaving', parent.apiKey)
  t.teardown(() => {
    staying.destroy()
  })
  t.ok(
    await until(WAIT_LIMIT_MS, async () => (await held()) === 2 && waiting.length === 2),
    'both requests wait for their connections to the upstream',
  )
  leaving.destroy()
  t.ok(
    await until(
      WAIT_LIMIT_MS,
      async () => (await metricValue(gw.app, 'tgw_client_aborts_total', { reason: 'hung_up' })) === 1,
    ),
    'the gateway saw the client leave',
  )
  letThrough()
  t.ok(
    await until(WAIT_LIMIT_MS, async () => answer.endsWith('answered') && (await held()) === 0),
    'the client that stayed got its answer, and both slots came back',
  )
  t.match(answer, /^HTTP\/1\.1 200 /)
  t.same(received, ['/tls/staying'], 'the upstream never received the request whose client had left')
  // What was never sent is not counted: usage has the answered request only.
  const used = async () => {
    await gw.app.usageMeter.flush()
    const [row] = await gw.sql<{ n: number }[]>`
      select coalesce(sum(requests), 0)::int as n from usage_daily where tenant_id = ${parent.id}`
    return row!.n
  }
  t.ok(await until(WAIT_LIMIT_MS, async () => (await used()) >= 1), 'the answered request is counted')
  t.equal(await used(), 1, 'and the one never sent is not')
})
