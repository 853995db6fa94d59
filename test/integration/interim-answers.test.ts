// Informational answers pass (RFC 9110 §15.2; docs/api.md): an upstream's `100 Continue` or
// `103 Early Hints` before its final answer is not an error, the client gets the final answer.
// The upstream is a raw socket server, so that the 1xx heads go out exactly as written: in one
// write with the final answer, one by one, a byte at a time, before the request's body is read,
// and on a connection kept alive for the next request. And they cannot put off the route's
// timeout_ms: an upstream that sends 1xx after 1xx and never a final answer is a 504 all the same.
import { Agent, request as httpRequest } from 'node:http'
import { createServer, type Socket } from 'node:net'
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { orTimeout } from '../helpers/poll.js'
import { listenOnLoopback } from '../helpers/upstream.js'

const CONTINUE = 'HTTP/1.1 100 Continue\r\n\r\n'
const EARLY_HINTS = 'HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n'
const final = (body: string) =>
  `HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: ${body.length}\r\n\r\n${body}`

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Writes `pieces` one by one, `gapMs` apart, so that each reaches the gateway in a read of its own. */
async function writeApart(socket: Socket, pieces: string[], gapMs = 15): Promise<void> {
  for (const piece of pieces) {
    if (socket.destroyed) return
    socket.write(piece)
    await pause(gapMs)
  }
}

/** The route under test for the 1xx that never end: its timeout_ms, and how often they come. */
const SHORT_TIMEOUT_MS = 1_000
const INTERIM_EVERY_MS = 300
/** How many informational answers the upstream wrote, by path, to requests that got no final one. */
const interimsSent = new Map<string, number>()

/**
 * Writes `interim` now and every INTERIM_EVERY_MS until the gateway closes the connection, and
 * never a final answer: each comes well within the route's timeout of the one before it.
 */
function interimForever(path: string, interim: string, first: string = interim) {
  return (socket: Socket) => {
    let count = 0
    const send = (bytes: string) => {
      socket.write(bytes)
      interimsSent.set(path, ++count)
    }
    send(first)
    const timer = setInterval(() => send(interim), INTERIM_EVERY_MS)
    socket.once('close', () => clearInterval(timer))
  }
}

const PROCESSING = 'HTTP/1.1 102 Processing\r\n\r\n'

/** How the upstream answers a request, by its path: once its head is in, and once its body is. */
interface Script {
  onHead?(socket: Socket): void
  onBody(socket: Socket, body: Buffer): void
}

const scripts: Record<string, Script> = {
  '/one-write': { onBody: (s) => s.write(CONTINUE + EARLY_HINTS + final('final')) },
  '/early-hints-only': { onBody: (s) => s.write(EARLY_HINTS + final('final')) },
  '/continue-twice': { onBody: (s) => s.write(CONTINUE + CONTINUE + final('final')) },
  '/hints-then-continue': { onBody: (s) => s.write(EARLY_HINTS + CONTINUE + final('final')) },
  '/apart': { onBody: (s) => void writeApart(s, [CONTINUE, EARLY_HINTS, final('final')]) },
  '/byte-by-byte': { onBody: (s) => void writeApart(s, [...CONTINUE, ...EARLY_HINTS, final('final')], 2) },
  // The usual unsolicited one: 100 as soon as the head is in, the answer once the body is.
  '/before-body': {
    onHead: (s) => s.write(CONTINUE),
    onBody: (s, body) => s.write(final(`got ${body.length} bytes`)),
  },
  // After the final head, the bytes are the body's, whatever they look like.
  '/continue-in-body': {
    onBody: (s) => void writeApart(s, ['HTTP/1.1 200 OK\r\nContent-Length: 25\r\n\r\n', CONTINUE]),
  },
  '/keep-alive': { onBody: (s) => s.write(CONTINUE + final('again')) },
  // Not an answer at all: undici's to refuse, as before (502).
  '/garbage': { onBody: (s) => s.end('SSH-2.0-OpenSSH\r\n\r\n') },
  // Informational answers every INTERIM_EVERY_MS, never a final one (to the short route).
  '/processing-forever': { onBody: interimForever('/processing-forever', PROCESSING) },
  '/hints-forever': { onBody: interimForever('/hints-forever', EARLY_HINTS) },
  '/continue-forever': { onBody: interimForever('/continue-forever', CONTINUE) },
  '/mixed-forever': { onBody: interimForever('/mixed-forever', PROCESSING + EARLY_HINTS + CONTINUE) },
  // A 103 whose head is a little over 16 KiB, in two reads (undici would take it: it counts only
  // the fields), then 103s that, once undici took one, would all have reached it too.
  '/long-hint-then-hints': {
    onBody: (s) => {
      // 26 bytes of status line, 8 of `X-Long: `: past 16 KiB before the head's end has come.
      s.write(`HTTP/1.1 103 Early Hints\r\nX-Long: ${'a'.repeat(16 * 1024 - 24)}`)
      setTimeout(() => !s.destroyed && interimForever('/long-hint-then-hints', EARLY_HINTS, '\r\n\r\n')(s), 50)
    },
  },
}

/** For each request to /keep-alive: how many requests its connection had carried before it. */
const carriedBefore: number[] = []
const upstream = createServer((socket) => {
  let requests = 0
  socket.on('error', () => {})
  let buffered = Buffer.alloc(0)
  let head: { script: Script; length: number } | null = null
  socket.on('data', (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk])
    for (;;) {
      if (head === null) {
        const end = buffered.indexOf('\r\n\r\n')
        if (end === -1) return
        const text = buffered.subarray(0, end).toString('latin1')
        const path = text
          .split(' ', 2)[1]!
          .replace(/^\/(short-)?interim/, '')
          .split('?')[0]!
        const length = Number(/\r\ncontent-length: *(\d+)/i.exec(text)?.[1] ?? 0)
        head = { script: scripts[path] ?? scripts['/one-write']!, length }
        if (path === '/keep-alive') carriedBefore.push(requests)
        requests++
        buffered = buffered.subarray(end + 4)
        head.script.onHead?.(socket)
      }
      if (buffered.length < head.length) return
      const body = buffered.subarray(0, head.length)
      buffered = buffered.subarray(head.length)
      const { script } = head
      head = null
      script.onBody(socket, body)
    }
  })
})
const { port: upstreamPort } = await listenOnLoopback(t, upstream)

const gw = await startGateway(t, {
  gatewayConfig: {
    routes: [
      { prefix: '/interim', upstream: `http://127.0.0.1:${upstreamPort}`, timeout_ms: 5_000 },
      { prefix: '/short-interim', upstream: `http://127.0.0.1:${upstreamPort}`, timeout_ms: SHORT_TIMEOUT_MS },
    ],
  },
})
const parent = await gw.createParent()

function call(
  path: string,
  options: { body?: string; agent?: Agent; prefix?: string } = {},
): Promise<{ status: number; body: string; headers: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      {
        host: '127.0.0.1',
        port: gw.port,
        method: options.body === undefined ? 'GET' : 'POST',
        path: `${options.prefix ?? '/interim'}${path}`,
        headers: { authorization: `Bearer ${parent.apiKey}` },
        agent: options.agent ?? false,
      },
      (response) => {
        let body = ''
        response.setEncoding('latin1').on('data', (chunk: string) => (body += chunk))
        response.on('end', () => resolve({ status: response.statusCode!, body, headers: response.headers }))
        response.on('error', reject)
      },
    )
    request.on('error', reject)
    request.end(options.body)
  })
}

for (const path of [
  '/one-write',
  '/early-hints-only',
  '/continue-twice',
  '/hints-then-continue',
  '/apart',
  '/byte-by-byte',
]) {
  t.test(`${path}: the client gets the final answer`, async (t) => {
    const answer = await call(path)
    t.equal(answer.status, 200, 'the final status')
    t.equal(answer.body, 'final', 'and its body')
  })
}

t.test('a 100 sent as soon as the head is in, before the body is read', async (t) => {
  const body = 'x'.repeat(50_000)
  const answer = await call('/before-body', { body })
  t.equal(answer.status, 200)
  t.equal(answer.body, `got ${body.length} bytes`, 'the whole body reached the upstream, and its answer the client')
})

t.test("bytes after the final answer's head are its body, whatever they look like", async (t) => {
  const answer = await call('/continue-in-body')
  t.equal(answer.status, 200)
  t.equal(answer.body, CONTINUE, 'passed on untouched')
})

t.test('on a connection kept alive, each answer may start with a 100', async (t) => {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  t.teardown(() => agent.destroy())
  for (let i = 0; i < 3; i++) {
    const answer = await call('/keep-alive', { body: `request ${i}`, agent })
    t.equal(answer.status, 200, `request ${i}: 200`)
    t.equal(answer.body, 'again', `request ${i}: the final body`)
  }
  // The gateway's pool keeps its upstream connections: the second and third went over one that
  // had carried an answer already.
  t.equal(carriedBefore.length, 3)
  t.ok(
    carriedBefore.slice(1).every((n) => n > 0),
    `each went over a connection that had answered before (${carriedBefore.join(', ')} requests before)`,
  )
})

t.test('what is not an answer at all is still 502', async (t) => {
  const answer = await call('/garbage')
  t.equal(answer.status, 502)
  t.match(answer.body, /upstream_unavailable/)
})

for (const path of ['/processing-forever', '/hints-forever', '/continue-forever', '/mixed-forever']) {
  t.test(`${path}: 1xx after 1xx never put off the route's timeout_ms: 504`, async (t) => {
    const started = performance.now()
    // Without the gateway's answer, the request would be held for as long as the upstream likes.
    const answer = await orTimeout(call(path, { prefix: '/short-interim' }), SHORT_TIMEOUT_MS * 5, null)
    const took = performance.now() - started
    t.ok(answer !== null, `answered within 5 × timeout_ms (${SHORT_TIMEOUT_MS} ms)`)
    t.equal(answer?.status, 504, 'upstream_timeout')
    t.match(answer?.body, /upstream_timeout/)
    t.ok(took >= SHORT_TIMEOUT_MS * 0.9, `not before timeout_ms: ${Math.round(took)} ms`)
    const sent = interimsSent.get(path) ?? 0
    t.ok(sent >= 3, `the upstream sent ${sent} informational answers before the 504`)
  })
}

t.test('an informational head past 16 KiB ends the connection: 502, not a wait without end', async (t) => {
  const answer = await orTimeout(
    call('/long-hint-then-hints', { prefix: '/short-interim' }),
    SHORT_TIMEOUT_MS * 5,
    null,
  )
  t.ok(answer !== null, `answered within 5 × timeout_ms (${SHORT_TIMEOUT_MS} ms)`)
  t.equal(answer?.status, 502)
  t.match(answer?.body, /upstream_unavailable/)
})
