// Upstream faults (docs/api.md): an upstream that refuses, hangs, says nothing at all, resets in
// the middle of its body, or trickles its body slowly. Each gets the right answer (502, 504, or,
// once the headers have gone out and no status can be sent any more, a connection the client
// sees closed, never a hang); no socket is left behind; and memory stays flat over 1,000 such
// requests.
//
// The gateway runs in a process of its own (test/faults/gateway-process.ts, with --expose-gc),
// so that its heap and its sockets are its own and can be measured after a full collection.
import { spawn, type ChildProcess } from 'node:child_process'
import {
  createServer as createHttpServer,
  request as httpRequest,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http'
import { createServer as createNetServer, type Server } from 'node:net'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { freshDatabase } from '../helpers/db.js'
import { createParent } from '../helpers/gateway.js'
import { eventually, sleep } from '../helpers/poll.js'
import { REFUSED_URL, listenOnLoopback } from '../helpers/upstream.js'
import { round } from './measuring.js'
import { RUN_TYPESCRIPT } from '../helpers/typescript.js'

const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url))
/** The routes' timeout_ms: how long an upstream may take to its headers, and between chunks. */
const TIMEOUT_MS = 300
/**
 * The gap between the chunks of a body that trickles beyond the timeout. undici (reply-from's
 * client) runs its header and body timeouts on a coarse clock, ticking every 499 ms: a timeout
 * of 300 ms fires 0.5 to 1 s after the last byte, so the gap must be longer than that.
 */
const TRICKLE_GAP_MS = 1_500
/** How late past TIMEOUT_MS a 504 or a cut may come (undici's coarse clock, a busy machine). */
const TIMEOUT_SLACK_MS = 2_000
/** A client gives up after this long and calls it a hang. */
const HANG_LIMIT_MS = 10_000
const MB = 1024 * 1024

// ---------------------------------------------------------------------------------------------
// Upstreams that misbehave, each counting the connections it holds open

interface Faulty {
  url: string
  /** Connections open now. */
  open(): number
  /** Connections ever accepted. */
  accepted(): number
}

async function serve(server: Server): Promise<Faulty> {
  let accepted = 0
  server.on('connection', () => accepted++)
  const { port, connections } = await listenOnLoopback(t, server)
  return { url: `http://127.0.0.1:${port}`, open: () => connections.size, accepted: () => accepted }
}

const http = (handler: (request: IncomingMessage, response: ServerResponse) => void) =>
  serve(
    createHttpServer((request, response) => {
      request.resume()
      request.once('end', () => handler(request, response))
    }),
  )

const BODY_CHUNK = Buffer.alloc(1_000, 'a')

/** Writes `chunks` chunks `gapMs` apart, then ends; stops if the connection goes away. */
function trickle(gapMs: number, chunks: number) {
  return (_request: IncomingMessage, response: ServerResponse) => {
    response.writeHead(200, {
      'content-type': 'application/octet-stream',
      'content-length': String(chunks * BODY_CHUNK.length),
    })
    let sent = 0
    const next = () => {
      if (response.destroyed) return
      response.write(BODY_CHUNK)
      if (++sent === chunks) return response.end()
      timer = setTimeout(next, gapMs)
    }
    let timer = setTimeout(next, 0)
    response.once('close', () => clearTimeout(timer))
  }
}

/** Headers and the first 1,000 bytes of a longer body, then the connection is destroyed. */
function resetMidBody(declareLength: boolean) {
  return (_request: IncomingMessage, response: ServerResponse) => {
    response.writeHead(200, {
      'content-type': 'application/octet-stream',
      ...(declareLength ? { 'content-length': '100000' } : {}),
    })
    response.write(BODY_CHUNK)
    const timer = setTimeout(() => response.socket?.destroy(), 20)
    response.once('close', () => clearTimeout(timer))
  }
}

const upstreams = {
  refuses: { url: REFUSED_URL, open: () => 0, accepted: () => 0 } as Faulty,
  // Reads the request, never answers.
  hangs: await http(() => {}),
  // Accepts the TCP connection, swallows what it is sent, never writes a byte (it closes only
  // when the gateway does).
  silent: await serve(createNetServer((socket) => socket.resume())),
  resetsWithLength: await http(resetMidBody(true)),
  resetsChunked: await http(resetMidBody(false)),
  tricklesWithinTimeout: await http(trickle(TIMEOUT_MS / 5, 8)),
  // undici's timers tick every 499 ms, so a timeout fires 0.5 to 1 s after it is due: the gap
  // here is well past that.
  tricklesBeyondTimeout: await http(trickle(TRICKLE_GAP_MS, 3)),
}
type Fault = keyof typeof upstreams
const faults = Object.keys(upstreams) as Fault[]

// ---------------------------------------------------------------------------------------------
// The gateway process

const db = await freshDatabase(t)
const key = await createParent(db.sql, { name: 'upstream faults' })
const routes = {
  routes: faults.map((fault) => ({ prefix: `/${fault}`, upstream: upstreams[fault].url, timeout_ms: TIMEOUT_MS })),
}

interface Stats {
  heapUsed: number
  rss: number
  external: number
  arrayBuffers: number
  sockets: { clients: number; upstreams: number; other: number }
}

const child: ChildProcess = spawn(
  process.execPath,
  ['--expose-gc', ...RUN_TYPESCRIPT, 'test/faults/gateway-process.ts'],
  {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    env: { ...process.env, DATABASE_URL: db.url, FAULT_ROUTES: JSON.stringify(routes) },
  },
)
let output = ''
child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
t.teardown(async () => {
  if (child.exitCode !== null || child.signalCode !== null) return
  if (child.connected) child.send({ type: 'close' })
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
  await exited
  clearTimeout(timer)
})

const port = await new Promise<number>((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error(`the gateway process did not start: ${output}`)), 60_000)
  child.on('message', (message: { type: string; port?: number }) => {
    if (message.type !== 'listening') return
    clearTimeout(timer)
    resolve(message.port!)
  })
  child.once('exit', (code) => reject(new Error(`the gateway process exited (${code}): ${output}`)))
})

function stats(): Promise<Stats> {
  return new Promise((resolve) => {
    const listener = (message: Stats & { type: string }) => {
      if (message.type !== 'stats') return
      child.off('message', listener)
      resolve(message)
    }
    child.on('message', listener)
    child.send({ type: 'stats' })
  })
}

// ---------------------------------------------------------------------------------------------
// A client that tells a whole answer from a cut one, and a cut one from a hang

interface Outcome {
  status: number | null
  code: string | null
  bytes: number
  /** The body arrived whole (Node's own check: declared length, or the last chunk). */
  complete: boolean
  /** The connection failed before the response began (its error code). */
  error: string | null
  hung: boolean
  ms: number
}

function call(path: string): Promise<Outcome> {
  return new Promise((resolve) => {
    const start = performance.now()
    let settled = false
    const settle = (outcome: Omit<Outcome, 'ms'>) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      resolve({ ...outcome, ms: performance.now() - start })
    }
    const request = httpRequest(
      {
        host: '127.0.0.1',
        port,
        path,
        agent: false,
        headers: { authorization: `Bearer ${key.apiKey}`, connection: 'close' },
      },
      (response) => {
        const chunks: Buffer[] = []
        response.on('data', (chunk: Buffer) => chunks.push(chunk))
        response.on('error', () => {
          // The cut is seen on 'close' below, with complete false.
        })
        response.once('close', () => {
          const body = Buffer.concat(chunks)
          let code: string | null = null
          if (String(response.headers['content-type']).startsWith('application/problem+json')) {
            try {
              code = (JSON.parse(body.toString('utf8')) as { code?: string }).code ?? null
            } catch {
              code = null
            }
          }
          settle({
            status: response.statusCode!,
            code,
            bytes: body.length,
            complete: response.complete,
            error: null,
            hung: false,
          })
        })
      },
    )
    const timer = setTimeout(() => {
      settle({ status: null, code: null, bytes: 0, complete: false, error: null, hung: true })
      request.destroy()
    }, HANG_LIMIT_MS)
    request.on('error', (err: NodeJS.ErrnoException) =>
      settle({ status: null, code: null, bytes: 0, complete: false, error: err.code ?? err.message, hung: false }),
    )
    request.end()
  })
}

const describe = (o: Outcome) =>
  o.hung
    ? `no answer within ${HANG_LIMIT_MS} ms`
    : o.error !== null
      ? `connection failed: ${o.error}`
      : `${o.status} ${o.code ?? ''} ${o.bytes} bytes${o.complete ? '' : ' (cut)'} in ${round(o.ms)} ms`

/** What each fault must look like to the client. */
const expected: Record<Fault, { what: string; check: (o: Outcome) => boolean }> = {
  refuses: {
    what: '502 upstream_unavailable',
    check: (o) => o.status === 502 && o.code === 'upstream_unavailable' && o.complete,
  },
  hangs: {
    what: `504 upstream_timeout after ${TIMEOUT_MS} ms`,
    check: (o) =>
      o.status === 504 &&
      o.code === 'upstream_timeout' &&
      o.complete &&
      o.ms >= TIMEOUT_MS * 0.9 &&
      o.ms < TIMEOUT_MS + TIMEOUT_SLACK_MS,
  },
  silent: {
    what: `504 upstream_timeout after ${TIMEOUT_MS} ms`,
    check: (o) =>
      o.status === 504 &&
      o.code === 'upstream_timeout' &&
      o.complete &&
      o.ms >= TIMEOUT_MS * 0.9 &&
      o.ms < TIMEOUT_MS + TIMEOUT_SLACK_MS,
  },
  resetsWithLength: {
    what: '200, then the connection closed short of the declared length',
    check: (o) => o.status === 200 && !o.complete && o.bytes < 100_000,
  },
  resetsChunked: {
    what: '200, then the connection closed without the last chunk',
    check: (o) => o.status === 200 && !o.complete,
  },
  tricklesWithinTimeout: {
    what: '200 with the whole body (each gap within the timeout)',
    check: (o) => o.status === 200 && o.complete && o.bytes === 8 * BODY_CHUNK.length,
  },
  tricklesBeyondTimeout: {
    what: '200, then the connection closed once a gap passed the timeout',
    check: (o) =>
      o.status === 200 && !o.complete && o.bytes < 3 * BODY_CHUNK.length && o.ms < TIMEOUT_MS + TIMEOUT_SLACK_MS,
  },
}

const measured: string[] = []

/** The faults whose upstream sends its headers at once, then breaks or trickles its body. */
const HEADERS_FIRST = new Set<Fault>(['resetsWithLength', 'resetsChunked', 'tricklesBeyondTimeout'])

/**
 * Until every faulty upstream holds no connection and the gateway no socket from a client or to
 * an upstream. (Its other sockets are its Postgres pool, which may have grown under the load.)
 */
async function settles(): Promise<{ took: number | null; last: Stats; open: Record<string, number> }> {
  let last = await stats()
  let open: Record<string, number> = {}
  const took = await eventually(
    15_000,
    async () => {
      last = await stats()
      open = Object.fromEntries(faults.map((fault) => [fault, upstreams[fault].open()]).filter(([, n]) => n !== 0))
      return Object.keys(open).length === 0 && last.sockets.clients === 0 && last.sockets.upstreams === 0
    },
    250,
  )
  return { took, last, open }
}

t.test('each fault gets the right answer, and none hangs', async (t) => {
  // Each fault has its own upstream and route: asked all at once, none waits for another's timeout.
  const outcomes = await Promise.all(faults.map((fault) => call(`/${fault}/x`)))
  for (const [i, fault] of faults.entries()) {
    const outcome = outcomes[i]!
    t.ok(expected[fault].check(outcome), `${fault}: ${expected[fault].what} (got ${describe(outcome)})`)
    t.notOk(outcome.hung, `${fault}: the client was not left hanging`)
    measured.push(`${fault}: ${describe(outcome)}`)
  }
  // The socket count sees what it must: a request in flight holds one socket each way.
  const inFlight = call('/hangs/in-flight')
  const seen = await eventually(
    5_000,
    async () => {
      const now = await stats()
      return now.sockets.clients >= 1 && now.sockets.upstreams >= 1
    },
    20,
  )
  t.not(seen, null, 'while a request is in flight, the gateway holds a client socket and an upstream socket')
  t.equal((await inFlight).status, 504)
  t.equal(upstreams.refuses.accepted(), 0)
  for (const fault of faults.filter((f) => f !== 'refuses'))
    t.ok(upstreams[fault].accepted() >= 1, `${fault}: the upstream was reached`)
})

t.test('no socket is left behind', async (t) => {
  // Nothing is in flight: every socket to an upstream or from a client must go (an idle
  // keep-alive connection to an upstream included, after undici's keep-alive timeout).
  const { took, last, open } = await settles()
  t.not(
    took,
    null,
    `every upstream connection closed, and the gateway holds no client or upstream socket (gateway: ${JSON.stringify(last.sockets)}, upstreams still open: ${JSON.stringify(open)})`,
  )
  measured.push(`sockets after the single requests: gateway ${JSON.stringify(last.sockets)} after ${took} ms`)
})

t.test('memory stays flat, and no socket leaks, over 1,000 faulty requests', async (t) => {
  // Half the mix waits out a timeout (0.5 to 1.5 s), so the run's length is set by how many wait
  // at once. Each fault is a route of its own: about CONCURRENCY / 3 wait on each slow one, well
  // under the 64 connections a tenant may hold on a route (a 429 would count as a wrong answer).
  const CONCURRENCY = 90
  const mix = faults.filter((fault) => fault !== 'tricklesWithinTimeout')
  let sent = 0
  let lateHeaders = 0
  const wrong: string[] = []
  async function batch(n: number): Promise<void> {
    let next = 0
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < n) {
          next++
          const fault = mix[sent++ % mix.length]!
          const outcome = await call(`/${fault}/${sent}`)
          if (expected[fault].check(outcome)) continue
          // Under this load the upstreams (this process's) may send even their headers after the
          // timeout: a 504 is then the right answer (the single requests above hold the rest).
          if (HEADERS_FIRST.has(fault) && expected.hangs.check(outcome)) lateHeaders++
          else wrong.push(`${fault}: ${describe(outcome)}`)
        }
      }),
    )
  }

  await batch(200) // warm-up: code paths compiled, pools and caches at their working size
  await sleep(500)
  const base = await stats()
  await batch(500)
  const mid = await stats()
  await batch(500)
  const end = await stats()

  t.same(wrong.slice(0, 10), [], `each of the ${sent} requests got its fault's answer (${wrong.length} did not)`)
  const firstHalf = mid.heapUsed - base.heapUsed
  const secondHalf = end.heapUsed - mid.heapUsed
  const total = end.heapUsed - base.heapUsed
  t.ok(total < 30 * MB, `heap after GC grew by less than 30 MB over 1,000 requests (${round(total / MB)} MB)`)
  t.ok(
    secondHalf <= Math.max(2 * MB, firstHalf / 2),
    `and does not grow with the count: +${round(firstHalf / MB)} MB over the first 500, +${round(secondHalf / MB)} MB over the next 500`,
  )
  measured.push(`504s of an upstream whose headers came after the timeout, under this load: ${lateHeaders}`)
  measured.push(
    `memory over ${sent - 200} requests after a warm-up of 200: heapUsed ${round(base.heapUsed / MB)} → ${round(mid.heapUsed / MB)} → ${round(end.heapUsed / MB)} MB, ` +
      `external ${round(base.external / MB)} → ${round(mid.external / MB)} → ${round(end.external / MB)} MB, ` +
      `rss ${round(base.rss / MB)} → ${round(mid.rss / MB)} → ${round(end.rss / MB)} MB`,
  )

  const { took, last, open } = await settles()
  t.not(
    took,
    null,
    `afterwards, every upstream connection closed and the gateway holds no client or upstream socket (gateway: ${JSON.stringify(last.sockets)}, upstreams still open: ${JSON.stringify(open)})`,
  )
  measured.push(
    `sockets after the 1,000: gateway ${JSON.stringify(last.sockets)} (before: ${JSON.stringify(base.sockets)}), settled in ${took} ms`,
  )
})

t.test('measured', async (t) => {
  for (const line of measured) t.comment(line)
  t.pass('reported')
})
