// How long a request waits on Postgres before it is answered 503 store_unavailable (docs/api.md,
// store_unavailable; docs/internals.md, caches): a partition must not hang requests until a TCP or
// connect timeout, tens of seconds later.
import type { FastifyInstance } from 'fastify'
import { MAIN_STATEMENT_TIMEOUT_MS } from './db.js'
import { DEFAULT_KEY_BATCH_PACING } from './key-lookup-batcher.js'

export interface StoreDeadlines {
  /**
   * A tenancy lookup (a key, a tenant, an OAuth client, a portal credential), its turn in a
   * lookup batcher included. Past it, a record seen within the stale window still serves.
   */
  lookupMs: number
  /** A management call's store work: its tenancy lookups, then its handler. */
  managementMs: number
  /**
   * The same for a limit simulation, which reads up to 10^7 records of the request log a COPY at a
   * time (each statement still under `managementMs`): seconds of paced work, not one slow query.
   */
  simulationMs: number
  /**
   * The least time between two Postgres queries of one lookup batcher (its pace: a flood of
   * made-up credentials costs one query per interval, not one each). Tests of that bound slow it,
   * so that a flood from a loaded machine still outruns it.
   */
  lookupIntervalMs: number
}

export const STORE_DEADLINES: Readonly<StoreDeadlines> = {
  lookupMs: 500,
  // The main pool's statement_timeout is the same: no statement of a call outlives its deadline.
  managementMs: MAIN_STATEMENT_TIMEOUT_MS,
  simulationMs: 60_000,
  lookupIntervalMs: DEFAULT_KEY_BATCH_PACING.intervalMs,
}

declare module 'fastify' {
  interface FastifyInstance {
    /** Set by buildApp (app-deps.ts's tuning may lengthen them for tests on a loaded machine). */
    storeDeadlines?: Readonly<StoreDeadlines>
  }
}

/** The deadlines of this app; the defaults in a scope built without buildApp (a unit test's). */
export const storeDeadlinesOf = (app: FastifyInstance): Readonly<StoreDeadlines> =>
  app.storeDeadlines ?? STORE_DEADLINES
