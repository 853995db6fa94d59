// Retention of events (docs/events.md): events older than EVENTS_RETENTION_DAYS are deleted in
// batches, each its own short statement, so that a sweep never holds many row locks or one long
// transaction. Every replica sweeps; SKIP LOCKED keeps them off each other's rows.
import type { FastifyBaseLogger } from 'fastify'
import type { Sql } from '../store/db.js'
import { deleteEventsBefore } from '../store/events.js'

const DAY_MS = 86_400_000

export interface RetentionOptions {
  sql: Sql
  retentionDays: number
  /** Rows per statement (default 1,000). */
  batchSize?: number
  /** Between sweeps (default an hour). */
  intervalMs?: number
  /** Before the first sweep (default a minute): a start is busy enough, and a quick restart need not sweep. */
  firstSweepAfterMs?: number
  /** The clock (ms since the epoch); tests move it. */
  clock?: () => number
  log?: FastifyBaseLogger
}

export class EventRetention {
  private timer: NodeJS.Timeout | null = null
  private running: Promise<number> | null = null
  private stopped = false

  private readonly options: RetentionOptions
  constructor(options: RetentionOptions) {
    this.options = options
  }

  /** One sweep: batches until one comes back short. Returns how many events it deleted. */
  sweep(): Promise<number> {
    if (this.running !== null) return this.running
    const run = this.deleteExpired().finally(() => {
      this.running = null
    })
    this.running = run
    return run
  }

  private async deleteExpired(): Promise<number> {
    const { sql, retentionDays, batchSize = 1_000, clock = Date.now } = this.options
    const before = new Date(clock() - retentionDays * DAY_MS)
    let total = 0
    while (!this.stopped) {
      const deleted = await deleteEventsBefore(sql, before, batchSize)
      total += deleted
      if (deleted < batchSize) break
    }
    return total
  }

  start(): void {
    const interval = this.options.intervalMs ?? 3_600_000
    const tick = () => {
      this.sweep()
        .then((deleted) => {
          if (deleted > 0) this.options.log?.info({ deleted }, 'expired events deleted')
        })
        .catch((err: unknown) => this.options.log?.warn({ err }, 'deleting expired events failed; next sweep retries'))
        .finally(() => {
          if (!this.stopped) this.timer = setTimeout(tick, interval).unref()
        })
    }
    this.timer = setTimeout(tick, this.options.firstSweepAfterMs ?? 60_000).unref()
  }

  /** No new sweep; waits for one under way (it stops after its current batch). */
  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer !== null) clearTimeout(this.timer)
    await this.running?.catch(() => {})
  }
}
