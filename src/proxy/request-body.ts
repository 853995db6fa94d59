// A proxied request body on its way to the upstream (docs/api.md): never parsed, held to the
// route's size limit, and ended when the client stops sending it, so that a stalled upload does
// not hold an upstream connection for as long as the client likes.
import { Transform, type TransformCallback } from 'node:stream'
import type { FastifyRequest } from 'fastify'
import { payloadTooLarge } from '../errors.js'

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
 * declared one to its length) and ends it with BodyIdleError after `idleMs` without a byte.
 * Time the upstream spends not reading does not count: the client cannot send then. The body is
 * its exchange's (exchange.ts): it ends, its timer with it, when the exchange does, whatever
 * ends that first.
 */
export function streamBody(limit: number, idleMs: number) {
  return (
    request: FastifyRequest,
    payload: NodeJS.ReadableStream,
    done: (err: Error | null, body?: unknown) => void,
  ) => {
    if (declaresTooMuch(request, limit)) return done(payloadTooLarge(limit))
    const counting = request.headers['content-length'] === undefined
    // The request log's request_bytes of a chunked body (request-log/capture.ts).
    const exchange = request.exchange
    let seen = 0
    const body = new Transform({
      transform(chunk: Buffer, _encoding, callback: TransformCallback) {
        idle.refresh()
        if (counting) {
          seen += chunk.length
          if (seen > limit) return callback(new BodyTooLargeError(limit))
          if (exchange) exchange.chunkedBodyBytes = seen
        }
        callback(null, chunk)
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
