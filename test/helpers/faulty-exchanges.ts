// The combinations docs/api.md, "Upstream failures", names: an upstream fault × a way
// a client's body can go. Upstreams are raw socket servers that each do one wrong thing; clients
// are raw sockets that send a head declaring a body, then trickle, stall, abort or complete it.
// For test/integration/exchange-faults.test.ts (each combination once) and
// test/faults/exchange-storm.test.ts (a storm of them against a gateway process).
import { connect, createServer, type Server, type Socket } from 'node:net'
import { type Stall, stalledWithin } from './loop-stalls.js'
import type { TestLike } from './test-like.js'
import { REFUSED_URL, listenOnLoopback } from './upstream.js'

/** A body declares this many bytes, and trickles this many of them this far apart. */
export const DECLARED_BODY_BYTES = 100
const TRICKLE_BYTES = 4
const TRICKLE_GAP_MS = 40

export const UPSTREAM_FAULTS = [
  'down',
  'resetsAtFirstBodyByte',
  'answersEarlyThenCloses',
  'answersAfterTimeout',
  'neverAnswers',
] as const
export type UpstreamFault = (typeof UPSTREAM_FAULTS)[number]

export const BODY_MODES = ['tricklesThenStalls', 'stallsAtOnce', 'aborts', 'completes'] as const
export type BodyMode = (typeof BODY_MODES)[number]

/** Calls `each` with a connection's request head and how many body bytes followed it so far. */
function onRequestBytes(server: Server, each: (socket: Socket, bodyBytes: number) => void): Server {
  server.on('connection', (socket) => {
    let received = Buffer.alloc(0)
    socket.on('error', () => {})
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk])
      const end = received.indexOf('\r\n\r\n')
      if (end !== -1) each(socket, received.length - end - 4)
    })
  })
  return server
}

async function serve(t: TestLike, server: Server): Promise<string> {
  const { port } = await listenOnLoopback(t, server)
  return `http://127.0.0.1:${port}`
}

/**
 * Starts an upstream for each fault; returns their URLs. `timeoutMs` is the routes' timeout_ms:
 * the late upstream answers three times past it.
 */
export async function faultyUpstreams(t: TestLike, timeoutMs: number): Promise<Record<UpstreamFault, string>> {
  const late = new Set<NodeJS.Timeout>()
  t.teardown(() => {
    for (const timer of late) clearTimeout(timer)
  })
  const answering = new WeakSet<Socket>()
  const make: Record<UpstreamFault, () => Promise<string>> = {
    // Nothing listens: a deploy, a crash.
    down: async () => REFUSED_URL,
    // Takes the head, and resets the connection at the first byte of the body.
    resetsAtFirstBodyByte: () =>
      serve(
        t,
        onRequestBytes(createServer(), (socket, bodyBytes) => {
          if (bodyBytes > 0) socket.resetAndDestroy()
        }),
      ),
    // Answers as soon as the head is in, before the body, and closes the connection.
    answersEarlyThenCloses: () =>
      serve(
        t,
        onRequestBytes(createServer(), (socket) => {
          if (!socket.writableEnded)
            socket.end('HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nearly')
        }),
      ),
    // Reads everything, and answers well after the route's timeout.
    answersAfterTimeout: () =>
      serve(
        t,
        onRequestBytes(createServer(), (socket) => {
          if (answering.has(socket)) return
          answering.add(socket)
          const timer = setTimeout(() => {
            late.delete(timer)
            if (!socket.destroyed) socket.end('HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nlate')
          }, timeoutMs * 3)
          late.add(timer)
          socket.once('close', () => {
            clearTimeout(timer)
            late.delete(timer)
          })
        }),
      ),
    // Reads everything, never writes a byte.
    neverAnswers: () =>
      serve(
        t,
        createServer((socket) => socket.on('error', () => {}).resume()),
      ),
  }
  const urls = await Promise.all(UPSTREAM_FAULTS.map((fault) => make[fault]()))
  return Object.fromEntries(UPSTREAM_FAULTS.map((fault, i) => [fault, urls[i]!])) as Record<UpstreamFault, string>
}

/**
 * The answers a combination may get: which one depends on which timer fires first. undici sends
 * a request's head with the first byte of its body: before that, the upstream sees nothing, and a
 * body that stalls at once is its idle timer's (408) unless the upstream cannot be reached.
 */
export function allowedAnswers(fault: UpstreamFault, mode: BodyMode): readonly number[] {
  if (fault === 'down') return [502]
  if (mode === 'stallsAtOnce') return [408, 504]
  if (fault === 'answersEarlyThenCloses') return [200, 502]
  if (fault === 'resetsAtFirstBodyByte') return [502]
  // An upstream silent while the body comes: a stalled body is 408, a whole one waits for 504.
  return mode === 'completes' ? [504] : [408, 504]
}

/** The route's timers the faulty exchanges run against. */
export interface RouteTimers {
  bodyIdleMs: number
  timeoutMs: number
}

/**
 * Whether `outcome` is its combination's answer (allowedAnswers), or a timer's answer where that
 * timer may rightly have fired on a loaded machine (`excused`):
 * - the body idle timer's 408, where the client took at least `bodyIdleMs` less a trickle's gap
 *   between two writes, or an event loop of the exchange stalled that long during it, or the two
 *   together (the client's longest gap and the loops' stalls during the exchange) came to that;
 * - the route timeout's 504 to an upstream that answers at once, where the loops stalled during the
 *   exchange for half of `timeoutMs` or more in all;
 * - the minimum body rate's 408 (proxy/request-body.ts), where the exchange lasted at least the
 *   body's grace, the longer of the two timers: the 100 bytes are due well within it plus their
 *   rate's allowance, so only a loaded machine's delays between writes (each shorter than
 *   `bodyIdleMs`) can bring it about.
 *
 * `loopStalls` are the gateway's, whose timers run before the bytes that came meanwhile are read,
 * and the upstreams', whose early answer then comes after the gateway's timer. The half: stalls
 * shorter than the recorder's threshold go unrecorded, and a loaded machine has many. On an idle
 * machine neither happens, and only the combination's answer passes.
 */
export function judgeAnswer(
  fault: UpstreamFault,
  mode: BodyMode,
  outcome: ClientOutcome,
  timers: RouteTimers,
  loopStalls: readonly Stall[],
): 'right' | 'excused' | 'wrong' {
  if (outcome.status !== null && allowedAnswers(fault, mode).includes(outcome.status)) return 'right'
  if (outcome.status === 504 && /did not answer within/.test(outcome.text))
    return stalledFor(loopStalls, outcome.startedAt, outcome.endedAt) >= timers.timeoutMs / 2 ? 'excused' : 'wrong'
  if (outcome.status === 408 && /came slower than/.test(outcome.text)) {
    const graceMs = Math.max(timers.bodyIdleMs, timers.timeoutMs)
    return outcome.endedAt - outcome.startedAt >= graceMs ? 'excused' : 'wrong'
  }
  if (outcome.status !== 408 || !/sent nothing for/.test(outcome.text)) return 'wrong'
  const longEnough = timers.bodyIdleMs - TRICKLE_GAP_MS
  const stalled = loopStalls.some(
    (stall) => stall[1] - stall[0] >= longEnough && stalledWithin([stall], outcome.startedAt, outcome.endedAt),
  )
  // The silence the gateway saw: the client's gap, lengthened by the loops' stalls meanwhile (at most
  // all of those during the exchange).
  const gapAndStalls = outcome.longestGapMs + stalledFor(loopStalls, outcome.startedAt, outcome.endedAt)
  return gapAndStalls >= longEnough || stalled ? 'excused' : 'wrong'
}

/** How long, in all, at least one of the loops was stalled between `from` and `to` (overlaps once). */
export function stalledFor(stalls: readonly Stall[], from: number, to: number): number {
  const within = stalls
    .map(([start, end]) => [Math.max(start, from), Math.min(end, to)] as const)
    .filter(([start, end]) => end > start)
    .sort((a, b) => a[0] - b[0])
  let total = 0
  let reached = from
  for (const [start, end] of within) {
    if (end <= reached) continue
    total += end - Math.max(start, reached)
    reached = end
  }
  return total
}

export interface ClientOutcome {
  /** The status of the answer; null when none came. */
  status: number | null
  /** The exchange ended: the gateway closed the connection, or (a whole body) the answer came whole. */
  ended: boolean
  /** What came back, for messages. */
  text: string
  /**
   * The longest the client took between two writes of its request (the head, each byte trickled,
   * the rest): on a loaded machine a gap meant to be TRICKLE_GAP_MS can outlast the gateway's body
   * idle timer, and then a 408 is that timer's right answer.
   */
  longestGapMs: number
  /** When the client connected, and when it was done (Date.now()). */
  startedAt: number
  endedAt: number
}

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Whether `text` holds a whole HTTP answer (with a Content-Length, as all of the gateway's here). */
function wholeAnswer(text: string): boolean {
  const end = text.indexOf('\r\n\r\n')
  if (end === -1) return false
  const length = /\r\ncontent-length: *(\d+)/i.exec(text.slice(0, end))
  return length !== null && text.length - end - 4 >= Number(length[1])
}

/**
 * POSTs to `path` on a raw socket with a body of DECLARED_BODY_BYTES that goes as `mode` says.
 * Then it waits for the gateway to close the connection (a body it did not read whole can carry
 * no other request), for at most `closeLimitMs`; a whole body's client is done once its answer
 * is whole. An aborting client is done once it has hung up.
 */
export function faultyClient(
  port: number,
  path: string,
  apiKey: string | null,
  mode: BodyMode,
  closeLimitMs: number,
): Promise<ClientOutcome> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1')
    let text = ''
    let settled = false
    let lastWrite = performance.now()
    let longestGapMs = 0
    const startedAt = Date.now()
    const write = (bytes: string) => {
      const now = performance.now()
      longestGapMs = Math.max(longestGapMs, now - lastWrite)
      lastWrite = now
      socket.write(bytes)
    }
    const settle = (ended: boolean) => {
      if (settled) return
      settled = true
      clearTimeout(limit)
      socket.destroy()
      const status = /^HTTP\/1\.1 (\d{3}) /.exec(text)
      const endedAt = Date.now()
      resolve({ status: status === null ? null : Number(status[1]), ended, text, longestGapMs, startedAt, endedAt })
    }
    socket.on('error', () => {})
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1')
      if (mode === 'completes' && wholeAnswer(text)) settle(true)
    })
    socket.on('close', () => settle(true))
    const limit = setTimeout(() => settle(false), closeLimitMs)
    write(
      [
        `POST ${path} HTTP/1.1`,
        'Host: gateway.test',
        ...(apiKey === null ? [] : [`Authorization: Bearer ${apiKey}`]),
        'Content-Type: application/octet-stream',
        `Content-Length: ${DECLARED_BODY_BYTES}`,
        '',
        '',
      ].join('\r\n'),
    )
    if (mode === 'stallsAtOnce') return
    void (async () => {
      for (let i = 0; i < TRICKLE_BYTES; i++) {
        await pause(TRICKLE_GAP_MS)
        if (socket.destroyed) return
        write('x')
      }
      if (mode === 'aborts') settle(true)
      else if (mode === 'completes' && !socket.destroyed) write('y'.repeat(DECLARED_BODY_BYTES - TRICKLE_BYTES))
    })()
  })
}

/** The routes of each fault, public and keyed, under /public/<fault> and /keyed/<fault>. */
export function faultyRoutes(
  urls: Record<UpstreamFault, string>,
  limits: { timeout_ms: number; body_idle_timeout_ms: number },
): Record<string, unknown>[] {
  return UPSTREAM_FAULTS.flatMap((fault) => [
    { prefix: `/public/${fault}`, upstream: urls[fault], public: true, ...limits },
    { prefix: `/keyed/${fault}`, upstream: urls[fault], ...limits },
  ])
}
