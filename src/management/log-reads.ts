// Reads of the request log by the API and the portal (request-routes.ts): where they run, and how
// many may run at once on this replica. A read may take up to the call's deadline in Postgres;
// without a bound, one parent's calls at its management rate could hold every pooled connection
// that other parents' calls and new keys' lookups need
// (docs/decisions/0221-two-reads-of-the-log-at-once-a-parent.md). A parent's own reads and its
// customers' portal reads are counted apart: a busy portal never refuses the parent's console, nor
// one customer's portal another's.
import { ApiError } from '../errors.js'
import { FairGate } from '../shared/fair-gate.js'
import type { Sql } from '../store/db.js'

/** A parent's own reads of the log under way at once (its API calls and its console). */
export const LOG_READS_AT_ONCE = 2
/** One sub-account's portal reads under way at once. */
export const PORTAL_READS_AT_ONCE = 2
/** The portal reads of all of one parent's sub-accounts under way at once. */
export const PORTALS_READS_AT_ONCE = 4

/**
 * Limit simulations under way at once on this replica, whoever's: each may hold up to
 * SIMULATION_MAX_SUB_ACCOUNTS sub-accounts' state (about 60 MB), and two of them would outgrow a
 * replica's heap (160 MB in the image) where one does not. A simulation that finds the place
 * taken waits for it, within its deadline, and the place goes to the parents in turn
 * (shared/fair-gate.ts): one parent's simulations one after another never keep another's out.
 */
export const SIMULATIONS_AT_ONCE = 1

/** A count of reads under way that a read takes a place in. */
export interface ReadPlace {
  key: string
  atOnce: number
  /** Who is full, as the refusal says it: "this account already has". */
  whoHas: string
}

/** A parent's own reads. */
export const parentPlaces = (accountId: string): ReadPlace[] => [
  { key: accountId, atOnce: LOG_READS_AT_ONCE, whoHas: 'this account already has' },
]

/** A sub-account's portal reads: its own places, within its parent's portals' places. */
export const portalPlaces = (accountId: string, subAccountId: string): ReadPlace[] => [
  { key: `portals ${accountId}`, atOnce: PORTALS_READS_AT_ONCE, whoHas: "this account's portals already have" },
  {
    key: `portal ${accountId} ${subAccountId}`,
    atOnce: PORTAL_READS_AT_ONCE,
    whoHas: "this sub-account's portal already has",
  },
]

/** Reads under way, by place. */
export class LogReads {
  private readonly underWay = new Map<string, number>()
  /** The replica's simulation place, taken by parents in turn. */
  private readonly simulations = new FairGate(SIMULATIONS_AT_ONCE, LOG_READS_AT_ONCE)

  /**
   * Runs a limit simulation of `accountId`: one of the parent's reads (refused as `run` refuses),
   * which waits for the replica's simulation place, its parent's turn, until `stop` aborts (its
   * deadline: the wait then rejects with the abort's reason).
   */
  simulate<T>(accountId: string, stop: AbortSignal, read: () => Promise<T>): Promise<T> {
    return this.run(parentPlaces(accountId), async () => {
      const leave = await this.simulations.enter(accountId, stop)!
      try {
        return await read()
      } finally {
        leave()
      }
    })
  }

  /** Runs `read` unless one of `places` is full: `429 too_many_concurrent_requests` then. */
  async run<T>(places: readonly ReadPlace[], read: () => Promise<T>): Promise<T> {
    const full = places.find((place) => (this.underWay.get(place.key) ?? 0) >= place.atOnce)
    if (full !== undefined)
      throw new ApiError(
        'too_many_concurrent_requests',
        `${full.whoHas} ${full.atOnce} reads of the request log under way; retry once one has answered`,
        { headers: { 'retry-after': '1' } },
      )
    for (const { key } of places) this.underWay.set(key, (this.underWay.get(key) ?? 0) + 1)
    try {
      return await read()
    } finally {
      for (const { key } of places) {
        const left = this.underWay.get(key)! - 1
        if (left === 0) this.underWay.delete(key)
        else this.underWay.set(key, left)
      }
    }
  }
}

/** Where the log is read from, and the reads under way there (one for the API and the portal). */
export interface RequestLogReader {
  sql: Sql
  reads: LogReads
  /** A read's statement timeout: a management call's store deadline (store/deadlines.ts). */
  statementTimeoutMs: number
  /** The log's database is a Postgres server, which sends rows as a binary COPY (the embedded PGlite does not). */
  copies: boolean
  /** REQUEST_LOG_RETENTION_DAYS: how far back the log holds every record. */
  retentionDays: number
  /** A limit simulation of at least this many records (by its bound) replays them on a thread of its own. */
  replayThreadFromRecords: number
  /** The most sub-accounts a limit simulation replays (SIMULATION_MAX_SUB_ACCOUNTS). */
  simulationMaxSubAccounts: number
}
