// The heavy reads of the management API (docs/operations.md, the heavy reads): reconciliation, the
// export's pull, the usage reports, the request log's reads and the limit simulator. They read
// through their own small pool (Store.heavyReadSql); here the gated ones take a place of this
// replica's gate first, shared fairly between parents (shared/fair-gate.ts; the request log's reads
// and the simulator keep places of their own, log-reads.ts), and the statements of all are
// cancelled when the call is answered 503 at its store deadline (store/call-statements.ts). A
// parent that floods them within its management rate thus holds at most its share of the reads'
// connections, never the pool's, and never those of the lookups.
import type { FastifyInstance, FastifyRequest, RouteOptions } from 'fastify'
import { ApiError } from '../errors.js'
import { FairGate } from '../shared/fair-gate.js'
import { stoppedBy } from '../store/call-statements.js'

/** Heavy reads under way (or waiting for a connection) at once on a replica, all parents together. */
export const HEAVY_READS_AT_ONCE = 4
/** One parent's heavy reads under way at once: its others wait for their turn. */
export const HEAVY_READS_PER_ACCOUNT = 2
/**
 * One parent's heavy reads in the gate at once, under way or waiting: more are refused 429. A
 * screen of the console asks for several at once (a month's usage and its days).
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

/**
 * How long a later page of a streamed heavy read (the export's) waits for its turn, in ms: past
 * it the answer is cut short, as when its store fails (its first page had the call's deadline).
 */
export const PAGE_TURN_WAIT_MS = 10_000

/** Runs one more statement of a heavy read that outlives its handler, in a place of the gate. */
export type HeavyReadTurn = <T>(work: () => Promise<T>) => Promise<T>

/** The turn of each gated call whose handler is under way or done (heavyReadTurn). */
const turns = new WeakMap<FastifyRequest, HeavyReadTurn>()

/** Each gated call's way to give its place back before its handler settles (leaveHeavyReadPlace). */
const places = new WeakMap<FastifyRequest, () => void>()

/**
 * The call's place of the gate goes back now. A handler that answers with a stream returns
 * `reply`, which settles only once the last byte is sent: a client that reads slowly, or not at
 * all, would hold the place that long, and keep other calls, its parent's own too, waiting. What
 * the call reads after this, it reads in turns of its own (heavyReadTurn). Nothing for a call that
 * holds no place.
 */
export function leaveHeavyReadPlace(request: FastifyRequest): void {
  places.get(request)?.()
}

/**
 * The turn of `request`, a gated heavy read, for what it reads after its handler returned (the
 * export's later pages, each a statement): a place of the gate taken for each, in its parent's
 * turn, so that a stream read fast holds no more of the replica than its parent's share.
 */
export function heavyReadTurn(request: FastifyRequest): HeavyReadTurn {
  return turns.get(request) ?? ((work) => work())
}

const tooMany = () =>
  new ApiError(
    'too_many_concurrent_requests',
    `this account already has ${HEAVY_READS_IN_GATE_PER_ACCOUNT} heavy reads (reconciliation, export, usage) under way or waiting; retry once one has answered`,
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
      const run = () => stoppedBy(stop, async () => handler.call(this, request, reply), request.trace)
      if (kind === 'own place') return run()
      const parent = request.principal!.tenant.id
      turns.set(request, (work) => inTurn(gate, parent, AbortSignal.timeout(PAGE_TURN_WAIT_MS), work))
      return inTurn(gate, parent, stop, run, (leave) => places.set(request, leave))
    }
  }
}

/**
 * Runs `work` in a place of `gate`, in `parent`'s turn, waiting until `signal` aborts at most.
 * `entered` gets the place's leave (which may be called early: once only counts) when it is taken.
 */
async function inTurn<T>(
  gate: FairGate,
  parent: string,
  signal: AbortSignal,
  work: () => Promise<T>,
  entered?: (leave: () => void) => void,
): Promise<T> {
  const entering = gate.enter(parent, signal)
  if (entering === null) throw tooMany()
  const leave = await entering
  entered?.(leave)
  try {
    return await work()
  } finally {
    leave()
  }
}
