// Tools for hostile-input and security tests: a catch-all upstream that records every request by
// a marker, a raw socket client that sends bytes exactly as written and reads back every response
// on the connection, and checks that say in words what is wrong (for fast-check properties, which
// fail by throwing).
import { randomBytes } from 'node:crypto'
import { createServer, type IncomingHttpHeaders } from 'node:http'
import { connect } from 'node:net'
import type { JsonBody } from './json.js'
import type { CommentingTestLike as TestLike } from './test-like.js'
import { listenOnLoopback } from './upstream.js'

// ---------------------------------------------------------------------------------------------
// Seeds: fixed by default so that CI is reproducible; HOSTILE_SEED=<n> replays a failure, and
// HOSTILE_SEED=random explores (the seed used is printed either way, and fast-check prints it again
// with the counterexample when a property fails).

export function propertySeed(t: TestLike, fallback: number): number {
  const given = process.env.HOSTILE_SEED
  const seed = given === undefined ? fallback : given === 'random' ? randomBytes(4).readInt32LE(0) : Number(given)
  if (!Number.isSafeInteger(seed)) throw new Error(`HOSTILE_SEED must be an integer or "random", not ${given}`)
  t.comment(`fast-check seed ${seed} (replay with HOSTILE_SEED=${seed})`)
  return seed
}

/** HOSTILE_RUNS_SCALE=2 doubles every property's run count (default 1). */
export function runs(n: number): number {
  const scale = Number(process.env.HOSTILE_RUNS_SCALE ?? '1')
  return Math.max(1, Math.round(n * (Number.isFinite(scale) && scale > 0 ? scale : 1)))
}

// ---------------------------------------------------------------------------------------------
// A recording catch-all upstream.

export interface Recorded {
  method: string
  url: string
  headers: IncomingHttpHeaders
  rawHeaders: string[]
  bodyBytes: number
  /** The X-Request-Id it arrived with: the marker the test sent, which the gateway keeps. */
  marker: string | undefined
}

export interface Recorder {
  url: string
  received: Recorded[]
  byMarker(marker: string): Recorded[]
  close(): Promise<void>
}

/** The header that tells an upstream's answer from the gateway's own. */
export const UPSTREAM_MARK = 'x-recorded-by'

/**
 * Answers every request 200 with a small JSON body and the header UPSTREAM_MARK, and records it.
 * Its header limit is 64 KiB, so that the gateway's own additions to a request near Node's 16 KiB
 * limit cannot make the upstream refuse what the gateway forwarded.
 */
export async function recordingUpstream(t: TestLike, name: string): Promise<Recorder> {
  const received: Recorded[] = []
  const index = new Map<string, Recorded[]>()
  const server = createServer({ maxHeaderSize: 64 * 1024 }, (request, response) => {
    let bodyBytes = 0
    request.on('data', (chunk: Buffer) => (bodyBytes += chunk.length))
    request.on('end', () => {
      const marker = typeof request.headers['x-request-id'] === 'string' ? request.headers['x-request-id'] : undefined
      const entry: Recorded = {
        method: request.method!,
        url: request.url!,
        headers: request.headers,
        rawHeaders: request.rawHeaders,
        bodyBytes,
        marker,
      }
      received.push(entry)
      if (marker !== undefined) index.set(marker, [...(index.get(marker) ?? []), entry])
      response.writeHead(200, { 'content-type': 'application/json', [UPSTREAM_MARK]: name })
      response.end('{"upstream":true}')
    })
  })
  const { port, close } = await listenOnLoopback(t, server)
  return { url: `http://127.0.0.1:${port}`, received, byMarker: (marker) => index.get(marker) ?? [], close }
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP/1.1 over a socket.

export type HeaderLines = [string, string][]

/** A request's bytes, exactly as given: no normalisation, no validation, latin1 for every char. */
export function requestBytes(options: {
  method: string
  target: string
  headers: HeaderLines
  body?: string | Buffer
  version?: string
}): Buffer {
  const head = `${options.method} ${options.target} ${options.version ?? 'HTTP/1.1'}\r\n${options.headers.map(([n, v]) => `${n}: ${v}\r\n`).join('')}\r\n`
  const body =
    options.body === undefined
      ? Buffer.alloc(0)
      : typeof options.body === 'string'
        ? Buffer.from(options.body, 'latin1')
        : options.body
  return Buffer.concat([Buffer.from(head, 'latin1'), body])
}

export interface RawHttpResponse {
  status: number
  /** Lower-cased names; a repeated header keeps its values in order. */
  headers: Record<string, string[]>
  body: string
  header(name: string): string | undefined
  json(): JsonBody
}

export interface RawExchange {
  responses: RawHttpResponse[]
  /** The server closed the connection (as opposed to our own timeout or `until` ending the wait). */
  closedByServer: boolean
  /** Bytes after the last complete response (a truncated one). */
  leftover: number
}

export interface ExchangeOptions {
  /** Give up (and close the connection) after this long; default 3 s. */
  waitMs?: number
  /** Stop as soon as this many complete responses arrived, without waiting for the server to close. */
  until?: number
  /** The request was HEAD: its responses have no body whatever their Content-Length says. */
  head?: boolean
}

/**
 * Writes `bytes` on a fresh connection and collects every response until the server closes the
 * connection, `until` responses are complete, or `waitMs` passes (then we close it).
 */
export function rawExchange(port: number, bytes: Buffer | string, options: ExchangeOptions = {}): Promise<RawExchange> {
  const { waitMs = 3000, until, head = false } = options
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1')
    const chunks: Buffer[] = []
    let closedByServer = false
    let finished = false
    const timer = setTimeout(() => socket.destroy(), waitMs)
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk)
      if (until !== undefined && parseResponses(Buffer.concat(chunks), head).complete >= until) socket.destroy()
    })
    socket.on('end', () => {
      closedByServer = true
    })
    // A reset after the server answered (it destroys the socket on a parse error) is an answer.
    socket.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'ECONNRESET' || err.code === 'EPIPE') closedByServer = true
      else if (!finished && chunks.length === 0) {
        finished = true
        clearTimeout(timer)
        reject(err)
      }
    })
    socket.on('close', () => {
      if (finished) return
      finished = true
      clearTimeout(timer)
      const { responses, leftover } = parseResponses(Buffer.concat(chunks), head)
      resolve({ responses, closedByServer, leftover })
    })
    socket.write(typeof bytes === 'string' ? Buffer.from(bytes, 'latin1') : bytes)
  })
}

function makeResponse(status: number, headers: Record<string, string[]>, body: Buffer): RawHttpResponse {
  const text = body.toString('utf8')
  return {
    status,
    headers,
    body: text,
    header: (name) => headers[name.toLowerCase()]?.join(', '),
    json: () => JSON.parse(text),
  }
}

/**
 * Splits a byte stream into HTTP/1.1 responses (Content-Length, chunked, or to the end).
 * `complete` counts those whose end has arrived (one that runs to the close never is).
 */
export function parseResponses(
  data: Buffer,
  head = false,
): { responses: RawHttpResponse[]; complete: number; leftover: number } {
  const responses: RawHttpResponse[] = []
  let complete = 0
  let at = 0
  while (at < data.length) {
    const headEnd = data.indexOf('\r\n\r\n', at, 'latin1')
    if (headEnd === -1) break
    const lines = data.subarray(at, headEnd).toString('latin1').split('\r\n')
    const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '')?.[1] ?? NaN)
    if (!Number.isInteger(status)) break
    const headers: Record<string, string[]> = {}
    for (const line of lines.slice(1)) {
      const colon = line.indexOf(':')
      if (colon <= 0) continue
      const name = line.slice(0, colon).trim().toLowerCase()
      headers[name] ??= []
      headers[name].push(line.slice(colon + 1).trim())
    }
    let bodyStart = headEnd + 4
    const chunked = (headers['transfer-encoding'] ?? []).join(',').toLowerCase().includes('chunked')
    const length = headers['content-length']?.[0]
    if (head || status < 200 || status === 204 || status === 304) {
      responses.push(makeResponse(status, headers, Buffer.alloc(0)))
      complete += 1
      at = bodyStart
    } else if (chunked) {
      const parts: Buffer[] = []
      let ended = false
      while (bodyStart < data.length) {
        const lineEnd = data.indexOf('\r\n', bodyStart, 'latin1')
        if (lineEnd === -1) break
        const size = parseInt(data.subarray(bodyStart, lineEnd).toString('latin1'), 16)
        if (!Number.isFinite(size)) break
        if (size === 0) {
          const trailerEnd = data.indexOf('\r\n\r\n', lineEnd - 2, 'latin1')
          ended = trailerEnd !== -1
          bodyStart = ended ? trailerEnd + 4 : data.length
          break
        }
        if (lineEnd + 2 + size + 2 > data.length) break
        parts.push(data.subarray(lineEnd + 2, lineEnd + 2 + size))
        bodyStart = lineEnd + 2 + size + 2
      }
      responses.push(makeResponse(status, headers, Buffer.concat(parts)))
      if (!ended) return { responses, complete, leftover: 0 }
      complete += 1
      at = bodyStart
    } else if (length !== undefined) {
      const n = Number(length)
      if (bodyStart + n > data.length) {
        responses.push(makeResponse(status, headers, data.subarray(bodyStart)))
        return { responses, complete, leftover: 0 }
      }
      responses.push(makeResponse(status, headers, data.subarray(bodyStart, bodyStart + n)))
      complete += 1
      at = bodyStart + n
    } else {
      // No length: the body runs to the close.
      responses.push(makeResponse(status, headers, data.subarray(bodyStart)))
      at = data.length
    }
  }
  return { responses, complete, leftover: data.length - at }
}

// ---------------------------------------------------------------------------------------------
// Checks that return what is wrong (null when all is well), for use inside properties.

const PROBLEM_FIELDS = ['type', 'title', 'status', 'detail', 'code', 'request_id'] as const

/**
 * Node's HTTP parser refused the request before fastify could route it (a malformed request
 * line or header, headers over 16 KiB): the gateway's clientErrorHandler answers 400 or 431 in
 * problem+json on the socket and closes the connection. No hook of the gateway ran, so nothing was
 * authenticated, counted or forwarded.
 */
export function isParserRefusal(res: RawHttpResponse): boolean {
  if (res.status !== 400 && res.status !== 431 && res.status !== 501) return false
  if (!/^application\/problem\+json/.test(res.header('content-type') ?? '')) return false
  if (res.header('connection') !== 'close' || res.header('x-request-id') === undefined) return false
  // (A HEAD request's answer is read without its body.)
  if (res.body === '') return true
  try {
    const body = JSON.parse(res.body) as { code?: string; detail?: string }
    return (
      (body.code === 'headers_too_large' && res.status === 431) ||
      (body.code === 'not_implemented' && res.status === 501 && /chunked alone/.test(body.detail ?? '')) ||
      (body.code === 'bad_request' && res.status === 400 && body.detail === 'the request is not valid HTTP/1.1')
    )
  } catch {
    return false
  }
}

/** What is wrong with a response that should be the gateway's problem+json (docs/api.md), or null. */
export function problemIssue(
  res: { status: number; body: string; header(name: string): string | undefined },
  expected?: { status?: number; code?: string; requestId?: string },
): string | null {
  const type = res.header('content-type') ?? ''
  if (!type.startsWith('application/problem+json'))
    return `status ${res.status} is not problem+json (content-type ${type || 'none'}): ${res.body.slice(0, 200)}`
  let body: Record<string, unknown>
  try {
    body = JSON.parse(res.body)
  } catch {
    return `problem body is not JSON: ${res.body.slice(0, 200)}`
  }
  for (const field of PROBLEM_FIELDS) if (!(field in body)) return `problem lacks "${field}": ${res.body.slice(0, 200)}`
  if (body.status !== res.status) return `problem status ${String(body.status)} != HTTP status ${res.status}`
  if (body.type !== `urn:tenancy-gateway:error:${String(body.code)}`)
    return `problem type ${String(body.type)} does not name its code ${String(body.code)}`
  if (body.request_id !== res.header('x-request-id'))
    return `problem request_id ${String(body.request_id)} != X-Request-Id ${res.header('x-request-id')}`
  if (expected?.requestId !== undefined && body.request_id !== expected.requestId)
    return `request_id ${String(body.request_id)} is not the sane id the client sent (${expected.requestId})`
  if (expected?.status !== undefined && res.status !== expected.status)
    return `status ${res.status} (${String(body.code)}), expected ${expected.status}${expected.code ? ` ${expected.code}` : ''}`
  if (expected?.code !== undefined && body.code !== expected.code)
    return `code ${String(body.code)}, expected ${expected.code}`
  if (res.status >= 500 && /Error|at \/|\.ts:|postgres|SQL/i.test(String(body.detail)))
    return `a 5xx shows internals: ${String(body.detail)}`
  return null
}

/** Throws `what: issue` when there is an issue: a property's way to fail with a reason. */
export function expectNo(issue: string | null, what: string): void {
  if (issue !== null) throw new Error(`${what}: ${issue}`)
}

// ---------------------------------------------------------------------------------------------
// Markers: each request carries a unique, sane X-Request-Id, which the gateway keeps, echoes and
// forwards; the recording upstream indexes by it.

let markerCount = 0
const markerRun = randomBytes(3).toString('hex')
export function nextMarker(kind: string): string {
  markerCount += 1
  return `${kind}-${markerRun}-${markerCount}`
}

/** Printable form of a string for failure messages (control and non-ASCII characters escaped). */
export function show(value: string): string {
  return JSON.stringify(value).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}
