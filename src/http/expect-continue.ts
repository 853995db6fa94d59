// `Expect: 100-continue` (RFC 9110 §10.1.1): Node would answer 100 Continue the moment a request
// head arrives, before the gateway has checked anything. The gateway answers it itself, once the
// key, the acting rules, the scopes and the declared body size have passed (docs/api.md), so that
// a refused client gets its refusal and never a 100 before it.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { payloadTooLarge } from '../errors.js'

/** Hands requests that expect 100-continue to fastify like any other, without Node's early 100. */
export function deferContinue(app: FastifyInstance): void {
  app.server.on('checkContinue', (req, res) => app.server.emit('request', req, res))
}

/** For a route whose checks all ran in onRequest: 413 for a declared body over `limit`, else 100. */
export function continueAfterChecks(limit: number) {
  return (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => {
    if (request.headers.expect === undefined) return done()
    const declared = request.headers['content-length']
    if (declared !== undefined && Number(declared) > limit) {
      return done(payloadTooLarge(limit))
    }
    reply.raw.writeContinue()
    done()
  }
}
