// Deletes expired idempotency keys (docs/api.md, Idempotency): on a timer, in batches, so that no
// statement holds many rows at once. Every replica sweeps; the batches skip rows another holds.
// An expired row that is still there is never answered from: a new request takes it over.
import type { FastifyBaseLogger } from 'fastify'
import type { Sql } from '../store/db.js'
import { deleteExpiredIdempotencyKeys } from '../store/idempotency.js'

export const IDEMPOTENCY_SWEEP_INTERVAL_MS = 60_000
export const IDEMPOTENCY_SWEEP_BATCH = 1_000
/** At most this many batches a sweep (the next sweep goes on): a backlog never hogs the pool. */
const MAX_BATCHES = 20

export class IdempotencySweep {
  private timer: NodeJS.Timeout | null = null
  private running: Promise<void> | null = null

  private readonly sql: Sql
  private readonly log: FastifyBaseLogger
  private readonly intervalMs
  constructor(sql: Sql, log: FastifyBaseLogger, intervalMs = IDEMPOTENCY_SWEEP_INTERVAL_MS) {
    this.sql = sql
    this.log = log
    this.intervalMs = intervalMs
  }

  start(): void {
    this.timer = setInterval(() => {
      this.running ??= this.sweep().finally(() => {
        this.running = null
      })
    }, this.intervalMs)
    this.timer.unref()
  }

  /** Stops the timer and waits for a sweep under way. */
  async stop(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer)
    this.timer = null
    await this.running
  }

  /** Deletes expired rows, a batch at a time, until a batch comes back short. */
  async sweep(): Promise<void> {
    try {
      for (let batch = 0; batch < MAX_BATCHES; batch++) {
        if ((await deleteExpiredIdempotencyKeys(this.sql, IDEMPOTENCY_SWEEP_BATCH)) < IDEMPOTENCY_SWEEP_BATCH) return
      }
    } catch (err) {
      this.log.warn({ err }, 'expired idempotency keys could not be deleted; the next sweep tries again')
    }
  }
}
