// Upstreams for the gateway to proxy to: plain HTTP servers on 127.0.0.1, on a port of their own,
// that record what they received and answer as the test says.
import { createHash } from 'node:crypto'
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo, Server as NetServer, Socket } from 'node:net'
import { stablePort } from './ports.js'
import type { TestLike } from './test-like.js'

export interface ReceivedRequest {
  method: string
  url: string
  headers: IncomingHttpHeaders
  rawHeaders: string[]
  bodyBytes: number
  bodySha256: string
}

export type UpstreamHandler = (request: IncomingMessage, response: ServerResponse, received: ReceivedRequest) => void

export interface Upstream {
  url: string
  port: number
  /** Every request the upstream received, in order, with its whole body hashed. */
  received: ReceivedRequest[]
  /** Replaces how the upstream answers (default: 200 with the received request as JSON). */
  answer(handler: UpstreamHandler): void
  close(): Promise<void>
}

export const echo: UpstreamHandler = (_request, response, received) => {
  response.writeHead(200, { 'content-type': 'application/json' })
  response.end(JSON.stringify(received))
}

/** Answers 200 reporting `?tokens=` (0 without) in X-Tokens-Used: a metered upstream (docs/api.md, Units). */
export const reportsTokens: UpstreamHandler = (request, response) => {
  const tokens = new URLSearchParams(request.url!.split('?')[1] ?? '').get('tokens') ?? '0'
  response.writeHead(200, { 'content-type': 'text/plain', 'x-tokens-used': tokens }).end('done')
}

export async function startUpstream(t: TestLike, handler: UpstreamHandler = echo): Promise<Upstream> {
  const received: ReceivedRequest[] = []
  let current = handler
  const server = createServer((request, response) => {
    const hash = createHash('sha256')
    let bodyBytes = 0
    request.on('data', (chunk: Buffer) => {
      bodyBytes += chunk.length
      hash.update(chunk)
    })
    request.on('end', () => {
      const entry: ReceivedRequest = {
        method: request.method!,
        url: request.url!,
        headers: request.headers,
        rawHeaders: request.rawHeaders,
        bodyBytes,
        bodySha256: hash.digest('hex'),
      }
      received.push(entry)
      current(request, response, entry)
    })
  })
  const { port, close } = await listenOnLoopback(t, server)
  return { url: `http://127.0.0.1:${port}`, port, received, answer: (h) => (current = h), close }
}

export interface HoldingUpstream extends Upstream {
  /** How many requests are being held now. */
  held(): number
  /** Answers every held request, and from now on answers held paths at once. */
  release(): void
}

export interface HoldingOptions {
  /** Requests whose path starts with this wait until release(). */
  holdPrefix: string
  /** Every other request is answered after a delay drawn evenly from this range (ms). */
  delayMs: readonly [number, number]
  /** How every request is answered, held or not (default: echo). */
  reply?: UpstreamHandler
}

/**
 * An upstream that holds some requests until the test releases them: requests certain to be in
 * flight at a moment the test chooses (the start of a gateway's close), not just likely to be.
 */
export async function holdingUpstream(t: TestLike, options: HoldingOptions): Promise<HoldingUpstream> {
  const reply = options.reply ?? echo
  const held: (() => void)[] = []
  let released = false
  const upstream = await startUpstream(t, (request, response, received) => {
    if (request.url!.startsWith(options.holdPrefix)) {
      if (released) reply(request, response, received)
      else held.push(() => reply(request, response, received))
      return
    }
    const [low, high] = options.delayMs
    setTimeout(() => reply(request, response, received), low + Math.random() * (high - low))
  })
  return {
    ...upstream,
    held: () => held.length,
    release: () => {
      released = true
      for (const send of held.splice(0)) send()
    },
  }
}

/**
 * Listens on 127.0.0.1 on a port of its own; `close` (also run at teardown) ends every
 * connection and then the server. `connections` are the ones open now.
 */
export async function listenOnLoopback(
  t: TestLike,
  server: NetServer,
): Promise<{ port: number; close: () => Promise<void>; connections: ReadonlySet<Socket> }> {
  const connections = new Set<Socket>()
  server.on('connection', (socket: Socket) => {
    connections.add(socket)
    socket.once('close', () => connections.delete(socket))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const close = () =>
    new Promise<void>((resolve) => {
      for (const socket of connections) socket.destroy()
      server.close(() => resolve())
    })
  t.teardown(close)
  return { port: (server.address() as AddressInfo).port, close, connections }
}

/**
 * A loopback port that refuses connections for the whole run: below the range the kernel hands
 * out for port 0 (32768–60999), and no test binds it.
 */
export const REFUSED_PORT = 1

/** `http://127.0.0.1:<REFUSED_PORT>`: an upstream that is down for the whole run. */
export const REFUSED_URL = `http://127.0.0.1:${REFUSED_PORT}`

/**
 * A port no server listens on now, for a server a test starts on it later (a spawned gateway's
 * PORT): one below the kernel's ephemeral range (ports.ts), since a port released inside it can be
 * taken by any test's next connection before that server binds it (a spawned gateway once found its
 * PORT in use). For an address that must refuse connections for a whole test, take REFUSED_PORT.
 */
export const closedPort = stablePort
