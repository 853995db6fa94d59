// The heavy reads of the management API (docs/operations.md, the heavy reads): reconciliation, the
// export's pull, the usage reports, the request log's reads and the limit simulator. They read
// through their own small pool (Store.heavyReadSql); here they take a place of this replica's
// gate first, shared fairly between parents (shared/fair-gate.ts), and their statements are
// cancelled when the call is answered 503 at its store deadline (store/call-statements.ts). A
// parent that floods them within its management rate thus holds at most its share of the reads'
// connections, never the pool's, and never those of the lookups.
import type { FastifyInstance, RouteOptions } from 'fastify'
import { ApiError } from '../errors.js'
import { FairGate } from '../shared/fair-gate.js'
import { stoppedBy } from '../store/call-statements.js'

/** Heavy reads under way (or waiting for a connection) at once on a replica, all parents together. */
export const HEAVY_READS_AT_ONCE = 4
/** One parent's heavy reads under way at once: its others wait for their turn. */
export const HEAVY_READS_PER_ACCOUNT = 2
/**
 * One parent's heavy reads in the gate at once, under way or waiting: more are refused 429. A
 * screen of the console asks for several at once (a month's usage, its days, the request log).
 */
export const HEAVY_READS_IN_GATE_PER_ACCOUNT = 8

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * A heavy read: `gated` takes a place of the replica's gate; `own place` is bounded by a
     * place of its own (the limit simulator's, log-reads.ts). Both stop their statements at a 503.
     */
    heavyRead?: 'gated' | 'own place'
  }
}

const tooMany = () =>
  new ApiError(
    'too_many_concurrent_requests',
    `this account already has ${HEAVY_READS_IN_GATE_PER_ACCOUNT} heavy reads (reconciliation, export, usage, request log) under way or waiting; retry once one has answered`,
    { headers: { 'retry-after': '1' } },
  )

/**
 * onRoute: a heavy read's handler runs once it has a place of `gate` (its parent's turn), with its
 * statements stopped when the store deadline answers 503. A call whose deadline passes while it
 * waits never reaches the store. Registered before dropLateAnswers, which then drops what such a
 * call ends with.
 */
export function gateHeavyReads(
  gate = new FairGate(HEAVY_READS_AT_ONCE, HEAVY_READS_IN_GATE_PER_ACCOUNT, HEAVY_READS_PER_ACCOUNT),
) {
  return (route: RouteOptions): void => {
    const kind = route.config?.heavyRead
    if (kind === undefined) return
    const handler = route.handler
    route.handler = async function (this: FastifyInstance, request, reply) {
      const stop = request.deadline!.stop.signal
      const run = () => stoppedBy(stop, async () => handler.call(this, request, reply))
      if (kind === 'own place') return run()
      const entering = gate.enter(request.principal!.tenant.id, stop)
      if (entering === null) throw tooMany()
      const leave = await entering
      try {
        return await run()
      } finally {
        leave()
      }
    }
  }
}
