// A proxied request body on its way to the upstream (docs/api.md): never parsed, held to the
// route's size limit, and ended when the client stops sending it or trickles it, so that a stalled
// or trickled upload does not hold an upstream connection for as long as the client likes.
import { performance } from 'node:perf_hooks'
import { Transform, type TransformCallback } from 'node:stream'
import type { FastifyRequest } from 'fastify'
import { payloadTooLarge } from '../errors.js'
import { HeldBody } from './held-body.js'

export class BodyTooLargeError extends Error {
  readonly limit: number
  constructor(limit: number) {
    super(`the request body is larger than ${limit} bytes`)
    this.limit = limit
    this.name = 'BodyTooLargeError'
  }
}

export class BodyIdleError extends Error {
  readonly idleMs: number
  constructor(idleMs: number) {
    super(`the request body sent nothing for ${idleMs} ms`)
    this.idleMs = idleMs
    this.name = 'BodyIdleError'
  }
}

/**
 * The slowest a body may come on average once its grace has passed (Kestrel's
 * MinRequestBodyDataRate; Apache's mod_reqtimeout asks 500): a second for every 240 bytes.
 */
export const MIN_BODY_BYTES_PER_SECOND = 240
const MS_PER_BYTE = 1000 / MIN_BODY_BYTES_PER_SECOND

export class BodyTooSlowError extends Error {
  constructor() {
    super(`the request body came slower than ${MIN_BODY_BYTES_PER_SECOND} bytes a second`)
    this.name = 'BodyTooSlowError'
  }
}

/** True when the declared Content-Length is over the limit (a chunked body is counted on the way). */
export function declaresTooMuch(request: FastifyRequest, limit: number): boolean {
  const declared = request.headers['content-length']
  return declared !== undefined && Number(declared) > limit
}

/**
 * A body's error once nobody reads it: undici listens while it sends the body, and drops its
 * listener when its request is over (the upstream failed, answered early, or timed out). An error
 * after that (the client's reset, the idle timer) has nothing left to end, and must not end the
 * process. One function for all bodies: no closure per request.
 */
function errorAfterTheExchange(): void {}

/**
 * The content parser of a proxied route: the request stream itself goes upstream, through a
 * pass-through that counts a chunked body against the limit (the HTTP parser already holds a
 * declared one to its length), ends it with BodyIdleError after `idleMs` without a byte, and with
 * BodyTooSlowError at a byte that comes past `graceMs` plus a second for every
 * MIN_BODY_BYTES_PER_SECOND bytes so far (a trickle never idle that long would otherwise hold its
 * upstream connection and slot for as long as it liked: undici's headers timeout starts only once
 * the body is sent). Time the upstream spends not reading counts for neither: the client cannot
 * send then. The body is its exchange's (exchange.ts): it ends, its timer with it, when the
 * exchange does, whatever ends that first. The rate costs a clock read a chunk, no timer.
 * A body of at most `holdBytes` (the route's retries.buffer_bytes; 0: none) is held as it passes
 * (held-body.ts), so that a retry can send it again.
 */
export function streamBody(limit: number, idleMs: number, graceMs: number, holdBytes = 0) {
  return (
    request: FastifyRequest,
    payload: NodeJS.ReadableStream,
    done: (err: Error | null, body?: unknown) => void,
  ) => {
    if (declaresTooMuch(request, limit)) return done(payloadTooLarge(limit))
    const counting = request.headers['content-length'] === undefined
    // The request log's request_bytes of a chunked body (request-log/capture.ts).
    const exchange = request.exchange
    const started = performance.now()
    let seen = 0
    /** Time the upstream spent not reading, up to the last chunk: not the client's. */
    let notReading = 0
    /** When the body's buffer last came full (the upstream not reading); -1 while it is not. */
    let fullSince = -1
    const declared = request.headers['content-length']
    const held =
      holdBytes > 0 && (declared === undefined || Number(declared) <= holdBytes) ? new HeldBody(holdBytes) : null
    request.heldBody = held
    const body = new Transform({
      transform(chunk: Buffer, _encoding, callback: TransformCallback) {
        idle.refresh()
        const now = performance.now()
        if (fullSince !== -1) {
          notReading += now - fullSince
          fullSince = -1
        }
        seen += chunk.length
        if (now - started - notReading > graceMs + seen * MS_PER_BYTE) return callback(new BodyTooSlowError())
        if (counting) {
          if (seen > limit) return callback(new BodyTooLargeError(limit))
          if (exchange) exchange.chunkedBodyBytes = seen
        }
        held?.hold(chunk)
        callback(null, chunk)
        // Full: no more chunks come until the upstream reads.
        if (body.readableLength >= body.readableHighWaterMark) fullSince = now
      },
      flush(callback: TransformCallback) {
        held?.ended()
        callback()
      },
    })
    const idle = setTimeout(function bodyIdle() {
      // A full buffer is the upstream's doing (it is not reading): wait on.
      if (body.readableLength >= body.readableHighWaterMark) idle.refresh()
      else body.destroy(new BodyIdleError(idleMs))
    }, idleMs)
    body.once('finish', () => clearTimeout(idle))
    body.once('close', () => clearTimeout(idle))
    body.on('error', errorAfterTheExchange)
    payload.on('error', (err) => body.destroy(err))
    payload.pipe(body)
    exchange?.carries(body)
    done(null, body)
  }
}
