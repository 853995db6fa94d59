// `Expect: 100-continue` (RFC 9110 §10.1.1): Node would answer 100 Continue the moment a request
// head arrives, before the gateway has checked anything. The gateway answers it itself, once the
// key, the acting rules, the scopes and the declared body size have passed (docs/api.md), so that
// a refused client gets its refusal and never a 100 before it.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { payloadTooLarge } from '../errors.js'

const EXPECTS_CONTINUE = Symbol('expectsContinue')

/**
 * Hands requests that expect 100-continue to fastify like any other, without Node's early 100,
 * marked so that the gateway answers 100 later. Node raises this only for HTTP/1.1 and an Expect
 * naming 100-continue (RFC 9110 §10.1.1 forbids a 100 to an HTTP/1.0 client). Any other
 * expectation is ignored, as the RFC allows, rather than refused by Node with a bare 417 before
 * any check, log or metric: the upstream never sees Expect anyway.
 */
export function deferContinue(app: FastifyInstance): void {
  app.server.on('checkContinue', (req, res) => {
    ;(req as Marked)[EXPECTS_CONTINUE] = true
    app.server.emit('request', req, res)
  })
  app.server.on('checkExpectation', (req, res) => app.server.emit('request', req, res))
}

interface Marked {
  [EXPECTS_CONTINUE]?: true
}

/** Whether the client waits for 100 Continue before it sends its body. */
export function expectsContinue(request: FastifyRequest): boolean {
  return (request.raw as Marked)[EXPECTS_CONTINUE] === true
}

/**
 * For a route whose checks all ran in onRequest: 413 for a declared body over `limit` (or the
 * route's own body limit), else 100.
 */
export function continueAfterChecks(scopeLimit: number) {
  return (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => {
    if (!expectsContinue(request)) return done()
    const limit = request.routeOptions.bodyLimit ?? scopeLimit
    const declared = request.headers['content-length']
    if (declared !== undefined && Number(declared) > limit) {
      return done(payloadTooLarge(limit))
    }
    reply.raw.writeContinue()
    done()
  }
}
