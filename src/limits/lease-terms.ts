// What every leased limit shares (leased-limit.ts): the context the limiter gives it, what a lease
// call carries and what its answer says, and the timings of leases (docs/internals.md, limits).
import type { LeaseStore } from './lease-store.js'
import type { LimiterMetrics } from './types.js'

/** What one lease call carries (lease-store.ts). */
export interface LeaseCall {
  keep: number
  returned: number
  wanted: number
  extra: number
  /** A metered limit's units charged beyond its lease since the last call (`charge`). */
  debt: number
}

export interface LimitContext {
  /** null: embedded mode, every limit is local for good. */
  store: LeaseStore | null
  now(): number
  /**
   * How long ago (ms) the oldest count this replica's usage meter has not written to Postgres was
   * made (0: all written): a quota's month rebuilt from Postgres misses what was counted since.
   */
  unwrittenForMs(): number
  /** Has the usage meter write what it counted (before a month is read from Postgres); never rejects. */
  writeUsage(): Promise<void>
  /** Whether Redis failed lately: shared limits switch to their local state. */
  redisDown(): boolean
  failed(): void
  answered(): void
  metrics: LimiterMetrics
}

/** Past this without a request, a lease shrinks to one unit (others may need the rest). */
export const IDLE_SHRINK_MS = 1_000
/** Past this without a request, the lease is given back and the limit forgotten. */
export const FORGET_AFTER_MS = 10_000
/** While Redis is unusable, each limit asks it again this often. */
export const PROBE_EVERY_MS = 1_000
/** A lease is sized to cover this much of the replica's recent demand. */
export const LEASE_HORIZON_MS = 100
/** After an empty answer, the next call waits at least this long. */
export const MIN_RETRY_MS = 10
/**
 * A limit found at its limit (an answer that could not cover what was asked: a rate's bucket
 * drained, a quota's month spent) is taken to be there until an answer that could comes this long
 * after the last that could not: a moment's stall, after which one call finds the refill of the
 * stall, says nothing of a client that is still past its rate.
 */
export const REACHED_FOR_MS = 1_000

export type Mode = 'cold' | 'shared' | 'local'

/** What every lease answer says. */
export interface Grant {
  granted: number
  waitMs: number
  inGrace: boolean
}
