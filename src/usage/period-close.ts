// Closes usage periods behind the replicas' flush marks (docs/billing.md), every few seconds, on
// every replica: the close is one idempotent statement (store/usage-periods.ts), so replicas need
// no leader for it. A failed close is logged and tried again at the next tick.
import type { FastifyBaseLogger } from 'fastify'
import type { Sql } from '../store/db.js'
import { ConfigError } from '../config-readers.js'
import { closedPeriodSeconds, closePeriods } from '../store/usage-periods.js'

/** How often a replica tries to close periods (the first export is due within 60 s of a close). */
export const CLOSE_INTERVAL_MS = 5_000
/** USAGE_CLOSE_GRACE_SECONDS's default: how long after its end a period waits for late flushes. */
export const DEFAULT_CLOSE_GRACE_SECONDS = 120

export interface PeriodCloserOptions {
  sql: Sql
  log: FastifyBaseLogger
  periodSeconds: number
  graceSeconds: number
  intervalMs?: number | undefined
  /** How long a replica that stopped flushing is waited for (default LIVE_REPLICA_SECONDS; tests shorten it). */
  liveReplicaSeconds?: number | undefined
}

/**
 * Refuses a period length other than that of the periods already closed: a closed period, and the
 * records exported of it, must not change
 * (docs/decisions/0300-the-periods-length-is-fixed-once-a-period-has.md). A closer with another
 * length closes nothing (store/usage-periods.ts), should the check have been passed over.
 */
export async function checkPeriodLength(
  sql: Sql,
  periodSeconds: number,
  unread: (err: unknown) => void = (err) => {
    throw err
  },
): Promise<void> {
  let closed: number | null
  try {
    closed = await closedPeriodSeconds(sql)
  } catch (err) {
    unread(err)
    return
  }
  if (closed !== null && closed !== periodSeconds)
    throw new ConfigError(
      'USAGE_PERIOD_SECONDS',
      `is ${periodSeconds}, but this database's usage periods are ${closed} s long and some have closed (and may have been billed): set it back to ${closed}, or use a new database`,
    )
}

export class PeriodCloser {
  private timer: NodeJS.Timeout | null = null
  private closing: Promise<Date | null> | null = null

  private readonly options: PeriodCloserOptions
  constructor(options: PeriodCloserOptions) {
    this.options = options
  }

  start(): void {
    if (this.timer !== null) return
    this.timer = setInterval(() => void this.close().catch(() => {}), this.options.intervalMs ?? CLOSE_INTERVAL_MS)
    this.timer.unref()
  }

  /** One close now; returns where the closed periods end (null: none yet). Calls at once share one. */
  close(): Promise<Date | null> {
    this.closing ??= closePeriods(this.options.sql, this.options)
      .catch((err: unknown) => {
        this.options.log.warn({ err }, 'closing usage periods failed; will retry')
        throw err
      })
      .finally(() => {
        this.closing = null
      })
    return this.closing
  }

  /** Stops the timer and waits for a close under way. */
  async stop(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer)
    this.timer = null
    await this.closing?.catch(() => {})
  }
}
