// The limits of the HTTP server itself, which buildApp (app.ts) passes to Fastify and Node: the
// management body limit, the request head's size and deadline, and the keep-alive timeout. Beside
// the header limits (header-counts.ts) that the head's size is taken from.
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
