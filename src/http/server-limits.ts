// The limits of the HTTP server itself, which buildApp (app.ts) passes to Fastify and Node: the
// management body limit, the request head's size and deadline, the keep-alive timeout, and
// MAX_CONNECTIONS. Beside the header limits (header-counts.ts) that the head's size is taken from.
import type { Server } from 'node:http'
import type { Socket } from 'node:net'
import { MAX_HEADER_BYTES } from './header-counts.js'

/** Management bodies are small JSON documents; proxied bodies get their own limit. */
export const MANAGEMENT_BODY_LIMIT = 64 * 1024

/** A request head must arrive within this (docs/api.md: 408 request_timeout). */
export const HEADERS_TIMEOUT_MS = 10_000
/** An idle keep-alive connection is closed after this; Node says so in `Keep-Alive: timeout=72`. */
export const KEEP_ALIVE_TIMEOUT_MS = 72_000
/**
 * Node's limit on a request head, target and headers (`maxHeaderSize`): set here rather than
 * left to `--max-http-header-size`, which NODE_OPTIONS may raise. No path segment can be longer,
 * so a router limit on parameters at this size refuses nothing a client can send.
 */
export const MAX_HEAD_BYTES = MAX_HEADER_BYTES

/**
 * Node's HTTP server options: the head's size and deadline, and how often Node looks for heads
 * past it (every 30 s by default, so a 10 s deadline could take 40 s). Checking walks only the
 * connections that have a request in progress. Node's own check of an HTTP/1.1 request without
 * Host is off: it answers an empty 400, and the request guards answer it in problem+json
 * (http/guards.ts).
 */
export function serverOptions(headersTimeoutMs: number): {
  headersTimeout: number
  connectionsCheckingInterval: number
  maxHeaderSize: number
  requireHostHeader: boolean
} {
  return {
    headersTimeout: headersTimeoutMs,
    connectionsCheckingInterval: Math.min(1_000, headersTimeoutMs),
    maxHeaderSize: MAX_HEAD_BYTES,
    requireHostHeader: false,
  }
}

/**
 * MAX_CONNECTIONS (docs/configuration.md): the server holds at most `max` client connections. A
 * connection that arrives when `max` are held first makes room by closing idle keep-alive ones
 * (closeIdleKeepAlive); only when none is idle is it closed unanswered, as Node's
 * `server.maxConnections` alone would. Without this, clients that each sent one request and then
 * sat idle for the 72 s keep-alive held every place, and every new client was refused.
 *
 * Node counts the connections (`_connections`, what `getConnections` reports) and emits
 * 'connection' synchronously once it has counted one, after the HTTP server's own listener: the
 * check below is one comparison per connection, and the walk runs only at the limit; after a walk
 * that found none idle, arrivals are refused without one for FRUITLESS_WALK_PAUSE_MS, so that a
 * flood against connections that are all busy pays one walk per pause, not one per connection.
 * Node's own limit, one higher, is never reached (each connection past `max` is settled before the
 * next is accepted) and stays only as a bound should this listener be bypassed.
 */
export function limitConnections(server: Server, max: number): void {
  server.maxConnections = max + 1
  const batch = evictionBatch(max)
  let walkAgainAt = 0
  server.on('connection', (socket: Socket) => {
    if ((server as unknown as { _connections: number })._connections <= max) return
    const now = performance.now()
    if (now >= walkAgainAt) {
      if (closeIdleKeepAlive(server, batch) > 0) return
      walkAgainAt = now + FRUITLESS_WALK_PAUSE_MS
    }
    socket.destroy()
  })
}

/**
 * How long arrivals at the limit are refused without a walk after one that found no idle
 * connection: a walk at 10,000 connections takes about a millisecond, and a connection that
 * becomes idle meanwhile makes room at most this late.
 */
export const FRUITLESS_WALK_PAUSE_MS = 100

/**
 * How many idle keep-alive connections one arrival at the limit closes at most: a 64th of the
 * limit, at least one (docs/decisions/0244-at-the-limit-a-newcomer-closes-idle-keep-alive.md).
 * Every walk reads Node's whole list, so closing one at a time would cost a walk of up to
 * MAX_CONNECTIONS per arrival at the limit; a 64th makes each walk pay for the next arrivals too
 * (about 64 connections looked at per connection admitted, whatever the limit), and leaves the
 * other idle connections their keep-alive.
 */
export function evictionBatch(max: number): number {
  return Math.max(1, Math.ceil(max / 64))
}

/** The part of Node's list of an HTTP server's connections (ConnectionsList) read here. */
interface ConnectionsList {
  /** The connections whose parser holds no request (set on the server once it listens). */
  idle(): readonly { socket?: Socket | null }[]
}

/** Node's `kConnections` (lib/_http_server.js), found by its description; undefined if absent. */
function connectionsList(server: Server): ConnectionsList | undefined {
  const key = Object.getOwnPropertySymbols(server).find((symbol) => symbol.description === 'http.server.connections')
  const list = key === undefined ? undefined : (server as unknown as Record<symbol, unknown>)[key]
  return typeof (list as Partial<ConnectionsList> | undefined)?.idle === 'function'
    ? (list as ConnectionsList)
    : undefined
}

/**
 * Closes at most `most` idle keep-alive connections of `server`; how many it closed.
 *
 * Not `server.closeIdleConnections()`: Node's idle list holds every connection whose parser has
 * no request, and that method keeps only the ones whose response has not ended, so it would also
 * close a response ended but still being written to a slow reader (cut short), a connection that
 * has not yet sent its first request (the arrival itself among them), and all the others at once.
 * An idle keep-alive connection here has read a request, has no response attached (Node attaches
 * each request's response, in order, until it has been written out) and nothing left to write.
 * An upgraded connection (a WebSocket) has left Node's list; a head still arriving is not idle.
 */
export function closeIdleKeepAlive(server: Server, most: number): number {
  const list = connectionsList(server)
  if (list === undefined) return 0
  let closed = 0
  for (const { socket } of list.idle()) {
    if (closed === most) break
    if (socket == null || !isIdleKeepAlive(socket)) continue
    socket.destroy()
    closed++
  }
  return closed
}

function isIdleKeepAlive(socket: Socket): boolean {
  return (
    !socket.destroyed &&
    socket.bytesRead > 0 &&
    (socket as Socket & { _httpMessage?: unknown })._httpMessage == null &&
    socket.writableLength === 0
  )
}

/**
 * Node hands an upgrade's connection to the server's 'upgrade' listeners without its own error
 * listener, and @fastify/http-proxy routes every upgrade through the router, the management API's
 * paths too. Until ws takes the socket (or an HTTP answer ends it), a client's reset would be an
 * 'error' nobody hears, and the end of the process. So each connection gets one listener of its
 * own when it is accepted: one function for all, and no 'upgrade' listener, whose presence alone
 * changes which upgrades http-proxy takes and whether Node hands any over.
 */
export function hearUpgradeErrors(server: Server): void {
  server.on('connection', (socket: Socket) => {
    socket.on('error', ignoreUpgradeError)
  })
}

function ignoreUpgradeError(): void {}
