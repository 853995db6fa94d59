// An answer sent before the request's body was read whole (an upstream that is down answers 502
// at once; an upstream that answers 200 at the head and closes) reaches a client that goes on
// sending its body and reads only later (src/http/lingering-close.ts): the gateway closes its side
// but reads what still comes, so the client's stack gets no reset that would throw the unread
// answer away.
import { connect, createServer } from 'node:net'
import t from 'tap'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { until } from '../helpers/poll.js'
import { listenOnLoopback, REFUSED_URL, startUpstream } from '../helpers/upstream.js'

const down = REFUSED_URL
const recording = await startUpstream(t)
// Answers 200 as soon as a request's head is in, before its body, and closes.
const early = createServer((socket) => {
  socket.on('error', () => {})
  socket.once('data', () => socket.end('HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nearly'))
})
const { port: earlyPort } = await listenOnLoopback(t, early)
const gw = await startGateway(t, {
  gatewayConfig: {
    routes: [
      { prefix: '/down', upstream: down, public: true },
      { prefix: '/up', upstream: recording.url, public: true },
      { prefix: '/early', upstream: `http://127.0.0.1:${earlyPort}`, public: true },
    ],
  },
})

const answeredOf = (statusClass: string) => () =>
  metricValue(gw.app, 'tgw_http_requests_total', { kind: 'proxy', status_class: statusClass })
const bad502s = answeredOf('5xx')
const early200s = answeredOf('2xx')

/** Sends a head and part of a body, the rest after the answer came, and reads only then. */
async function answerToALateReader(path = '/down/x', answers = bad502s): Promise<string> {
  const socket = connect(gw.port, '127.0.0.1')
  socket.on('error', () => {})
  let text = ''
  let closed = false
  socket.on('close', () => (closed = true))
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()))
  // Nothing is read until the whole body was sent: the answer waits in this side's kernel.
  socket.pause()
  const answered = await answers()
  socket.write(`POST ${path} HTTP/1.1\r\nHost: gateway.test\r\nContent-Length: 200000\r\n\r\n${'x'.repeat(1000)}`)
  // The gateway answers as soon as the upstream refuses (or answers), and counts it once sent.
  await until(10_000, async () => (await answers()) > answered)
  // The rest of the body: bytes that reach a socket already closed would be answered by a reset.
  for (let i = 0; i < 20 && !closed; i++) {
    socket.write('y'.repeat(10_000))
    await new Promise((resolve) => setImmediate(resolve))
  }
  socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')))
  socket.resume()
  await until(10_000, async () => closed || text.includes('\r\n\r\n'))
  socket.destroy()
  return text
}

t.test('a client still sending its body gets the 502, not a reset', async (t) => {
  for (let round = 0; round < 5; round++) {
    const text = await answerToALateReader()
    t.match(text, /^HTTP\/1\.1 502 /, `round ${round}: the 502 came (got ${JSON.stringify(text.slice(0, 40))})`)
  }
})

t.test("a client still sending its body gets the upstream's early answer, not a reset", async (t) => {
  for (let round = 0; round < 5; round++) {
    const text = await answerToALateReader('/early/x', early200s)
    t.match(
      text,
      /^HTTP\/1\.1 200 [\s\S]*early$/,
      `round ${round}: the 200 came whole (got ${JSON.stringify(text.slice(0, 40))})`,
    )
  }
})

t.test('a request sent after the rest of that body is never served', async (t) => {
  // Half-open: the client goes on sending after the gateway's side ended, as a pipelining one may.
  const socket = connect({ port: gw.port, host: '127.0.0.1', allowHalfOpen: true })
  socket.on('error', () => {})
  let text = ''
  socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')))
  t.teardown(() => socket.destroy())
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()))
  socket.write(`POST /down/x HTTP/1.1\r\nHost: gateway.test\r\nContent-Length: 2000\r\n\r\n${'x'.repeat(1000)}`)
  t.ok(await until(10_000, async () => text.includes('\r\n\r\n')), 'the 502 came')
  socket.write(`${'y'.repeat(1000)}POST /up/pipelined HTTP/1.1\r\nHost: gateway.test\r\nContent-Length: 0\r\n\r\n`)
  // Let go of by the gateway: at the pipelined request, or at the linger's bound without the rule.
  const connections = () =>
    new Promise<number>((resolve) => gw.app.server.getConnections((_error, count) => resolve(count)))
  t.ok(await until(10_000, async () => (await connections()) === 0), 'the gateway let go of the connection')
  t.match(text, /^HTTP\/1\.1 502 /, 'the one answer is the 502')
  t.notMatch(text.slice(1), /HTTP\/1\.1 /, 'no second answer')
  t.same(
    recording.received.map((r) => r.url),
    [],
    'the upstream never got the request sent after the body',
  )
})
