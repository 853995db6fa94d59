// Whether this replica should get traffic (docs/operations.md, shutdown): main.ts sets `draining`
// when shutdown begins, /readyz (ops/health.ts) answers 503 from then on, and every response says
// Connection: close.
import fp from 'fastify-plugin'
import type { Readiness } from './health.js'

export const readinessPlugin = fp(
  async (app) => {
    const readiness: Readiness = { draining: false }
    app.decorate('readiness', readiness)

    // Once shutdown began, every response says Connection: close, so that a keep-alive client lets
    // go as soon as its request is answered: Node closes only the connections idle at close time,
    // and one that was busy then would otherwise hold the shutdown until SHUTDOWN_TIMEOUT_MS.
    app.addHook('onSend', (_request, reply, payload, done) => {
      if (readiness.draining) reply.header('connection', 'close')
      done(null, payload)
    })
  },
  { name: 'readiness' },
)
