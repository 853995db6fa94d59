// A request body that keeps coming, but slower than MIN_BODY_BYTES_PER_SECOND once its grace has
// passed, is ended as a stalled one is (docs/api.md, "Time and connections"): 408 request_timeout,
// the connection closed, and the upstream connection and the tenant's slot given back. A byte
// every 250 ms is never idle for body_idle_timeout_ms; without the rate, such uploads held their
// slots for as long as their clients liked (undici starts its headers timeout only once the body
// is sent). Over real sockets: raw clients, a real upstream.
import { connect, type Socket } from 'node:net'
import t from 'tap'
import { MIN_BODY_BYTES_PER_SECOND } from '../../src/proxy/request-body.js'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { orTimeout, until } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'

/** The route's timeout_ms and body_idle_timeout_ms: the grace a body has before its rate counts. */
const GRACE_MS = 1_000
const DRIP_EVERY_MS = 250

/** A raw upload: its head written, then a byte every DRIP_EVERY_MS (never idle for GRACE_MS). */
interface Trickle {
  socket: Socket
  /** What the gateway answered, once its head has come whole. */
  answer: Promise<string>
  /** Body bytes written so far. */
  sent(): number
}

function trickle(port: number, apiKey: string, path: string): Promise<Trickle> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1')
    let text = ''
    let sent = 0
    const answer = new Promise<string>((done) => {
      socket.on('data', (chunk: Buffer) => {
        text += chunk.toString('latin1')
        if (text.includes('\r\n\r\n')) done(text)
      })
    })
    socket.on('error', () => {})
    // Like the attack, the client goes on sending after it was answered: the gateway lets go anyway.
    const drip = setInterval(() => {
      if (socket.destroyed || !socket.writable) return clearInterval(drip)
      socket.write('x')
      sent++
    }, DRIP_EVERY_MS)
    socket.once('close', () => clearInterval(drip))
    socket.once('connect', () => {
      socket.write(
        [
          `POST ${path} HTTP/1.1`,
          'Host: gw',
          `Authorization: Bearer ${apiKey}`,
          'Content-Length: 1000000',
          '',
          '',
        ].join('\r\n'),
      )
      resolve({ socket, answer, sent: () => sent })
    })
    socket.once('error', reject)
  })
}

const upstream = await startUpstream(t)
const gw = await startGateway(t, {
  gatewayConfig: {
    routes: [
      {
        prefix: '/v1/up',
        upstream: upstream.url,
        timeout_ms: GRACE_MS,
        body_idle_timeout_ms: GRACE_MS,
        max_connections: 4,
        max_connections_per_tenant: 2,
      },
    ],
  },
})
const held = () => metricValue(gw.app, 'tgw_proxy_upstream_slots', { route: '/v1/up', state: 'held' })

t.test('a body trickled below the minimum rate: 408, and its slots are given back', async (t) => {
  const parent = await gw.createParent()
  const started = performance.now()
  const uploads = await Promise.all([1, 2].map((i) => trickle(gw.port, parent.apiKey, `/v1/up/slow-${i}`)))
  t.teardown(() => {
    for (const upload of uploads) upload.socket.destroy()
  })
  t.ok(await until(5_000, async () => (await held()) === 2), 'the two uploads hold their slots')
  const third = await callAs(gw.url, parent.apiKey, { path: '/v1/up/third' })
  t.equal(third.status, 429, 'the tenant at its share: a third request is refused while they hold')

  // Without the rate, neither would ever be answered: the bytes keep coming, never idle that long.
  const answers = await orTimeout(Promise.all(uploads.map((upload) => upload.answer)), GRACE_MS * 10, null)
  const took = performance.now() - started
  t.ok(answers !== null, `both answered within 10 × the grace (${GRACE_MS} ms)`)
  for (const answer of answers ?? []) {
    t.match(answer, /^HTTP\/1\.1 408 /, '408')
    t.match(answer, /"code":"request_timeout"/)
    t.match(answer, new RegExp(`slower than ${MIN_BODY_BYTES_PER_SECOND} bytes a second`), 'saying why')
    t.match(answer, /\r\nconnection: close\r\n/i, 'and the connection is closed')
  }
  t.ok(took >= GRACE_MS * 0.9, `not before the grace: ${Math.round(took)} ms`)
  t.comment(`the uploads sent ${uploads.map((u) => u.sent()).join(', ')} bytes by then`)

  // The clients go on dripping: the gateway closes the connections after its lingering close.
  t.ok(await until(10_000, async () => (await held()) === 0), 'the slots are given back')
  t.ok(
    await until(5_000, async () => uploads.every((upload) => upload.socket.destroyed)),
    "the clients' connections are closed",
  )
  const again = await callAs(gw.url, parent.apiKey, { path: '/v1/up/again' })
  t.equal(again.status, 200, 'the tenant gets in again')
  t.notOk(
    upstream.received.some((r) => r.url.startsWith('/v1/up/slow-')),
    'the upstream never got a whole body from them',
  )
})

t.test('a slow body above the minimum rate, longer than the grace, is forwarded whole', async (t) => {
  const parent = await gw.createParent()
  const piece = 'y'.repeat(200)
  const pieces = 12
  const socket = connect(gw.port, '127.0.0.1')
  t.teardown(() => socket.destroy())
  let text = ''
  socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')))
  socket.on('error', () => {})
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()))
  socket.write(
    [
      'POST /v1/up/steady HTTP/1.1',
      'Host: gw',
      `Authorization: Bearer ${parent.apiKey}`,
      `Content-Length: ${piece.length * pieces}`,
      '',
      '',
    ].join('\r\n'),
  )
  // 200 bytes every 150 ms: some 1,300 bytes a second, for about twice the grace.
  const started = performance.now()
  let written = 0
  const drip = setInterval(() => {
    socket.write(piece)
    if (++written === pieces) clearInterval(drip)
  }, 150)
  t.teardown(() => clearInterval(drip))
  t.ok(await until(10_000, async () => text.includes('\r\n\r\n')), 'answered')
  t.comment(`the body took ${Math.round(performance.now() - started)} ms`)
  t.match(text, /^HTTP\/1\.1 200 /, '200')
  t.equal(upstream.received.find((r) => r.url === '/v1/up/steady')?.bodyBytes, piece.length * pieces, 'whole')
})
