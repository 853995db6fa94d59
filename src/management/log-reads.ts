// Reads of the request log by the API and the portal (request-routes.ts): where they run, and how
// many of one parent account's may run at once on this replica. A read may take up to the call's
// deadline in Postgres; without a bound, one parent's calls at its management rate could hold
// every pooled connection that other parents' calls and new keys' lookups need (docs/decisions.md).
import { ApiError } from '../errors.js'
import type { Sql } from '../store/db.js'

/** A parent's reads of the log under way at once, its sub-accounts' portal reads with its own. */
export const LOG_READS_AT_ONCE = 2

/** Reads under way, by parent account: at most `atOnce` each. */
export class AccountReads {
  private readonly underWay = new Map<string, number>()

  constructor(readonly atOnce = LOG_READS_AT_ONCE) {}

  /** Runs `read` unless `accountId` has `atOnce` reads under way: `429 too_many_concurrent_requests` then. */
  async run<T>(accountId: string, read: () => Promise<T>): Promise<T> {
    const count = this.underWay.get(accountId) ?? 0
    if (count >= this.atOnce)
      throw new ApiError(
        'too_many_concurrent_requests',
        `this account already has ${this.atOnce} reads of the request log under way; retry once one has answered`,
        { headers: { 'retry-after': '1' } },
      )
    this.underWay.set(accountId, count + 1)
    try {
      return await read()
    } finally {
      const left = this.underWay.get(accountId)! - 1
      if (left === 0) this.underWay.delete(accountId)
      else this.underWay.set(accountId, left)
    }
  }
}

/** Where the log is read from, and the reads under way there (one for the API and the portal). */
export interface RequestLogReader {
  sql: Sql
  reads: AccountReads
}
