// A Redis outage in the log: one warning when it begins, one a minute while it lasts, and one line
// when it ends, whichever of the cache's connections (commands, subscriber) fail meanwhile. Their
// errors come with every reconnection attempt; a warning each would fill the log with the same line.
import type { FastifyBaseLogger } from 'fastify'

/** How often an outage that goes on is said again. */
export const OUTAGE_REMINDER_MS = 60_000

export class OutageNotice {
  /** The connections failing now, and when the outage began and was last said. */
  private readonly failing = new Set<string>()
  private since = 0
  private saidAt = 0
  private readonly log: Pick<FastifyBaseLogger, 'warn' | 'info'>
  private readonly says: { failed: string; recovered: string }
  private readonly now: () => number

  /** `says`: what the log says as it begins (what is done meanwhile) and as it ends. */
  constructor(
    log: Pick<FastifyBaseLogger, 'warn' | 'info'>,
    says: { failed: string; recovered: string },
    now: () => number = Date.now,
  ) {
    this.log = log
    this.says = says
    this.now = now
  }

  /** `connection` failed (again): said if the outage begins here or was last said a minute ago. */
  failed(connection: string, err: unknown): void {
    const now = this.now()
    if (this.failing.size === 0) {
      this.since = now
      this.saidAt = now
      this.failing.add(connection)
      this.log.warn({ err, connection }, this.says.failed)
      return
    }
    this.failing.add(connection)
    if (now - this.saidAt < OUTAGE_REMINDER_MS) return
    this.saidAt = now
    this.log.warn(
      { err, connection, for_seconds: Math.round((now - this.since) / 1000) },
      `${this.says.failed} (still)`,
    )
  }

  /** `connection` answers again: the outage ends when every failing connection does. */
  recovered(connection: string): void {
    if (!this.failing.delete(connection) || this.failing.size > 0) return
    this.log.info({ for_seconds: Math.round((this.now() - this.since) / 1000) }, this.says.recovered)
  }
}
