// The usage export's push (docs/billing.md, Pushing the export): the closed periods' records, in
// batches of up to 100 CloudEvents (`application/cloudevents-batch+json`), signed as webhooks are,
// to USAGE_EXPORT_URL. Every replica runs one; the one holding the lease in Postgres sends, the
// others only keep the lag metric. A batch the receiver does not acknowledge (2xx) goes again on
// the webhooks' retry schedule, then every last delay of it, until it does: records are never
// dropped, and their ids let a receiver that dedupes count each once.
import { createHash, randomUUID } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { Sql } from '../store/db.js'
import {
  acknowledgeExport,
  claimExport,
  exportCursor,
  exportFailed,
  releaseExport,
  recordsAfter,
} from '../store/usage-export.js'
import { postSigned } from '../webhooks/deliver.js'
import type { RetrySchedule } from '../webhooks/retry-schedule.js'
import { usageEvent } from './export.js'

/** Records a batch holds at most (what OpenMeter's batch ingest takes in one request). */
export const EXPORT_BATCH_SIZE = 100
/** How often a replica looks for closed records to push (the first within 60 s of a close). */
export const EXPORT_INTERVAL_MS = 5_000
/** How long a replica's lease runs without a renewal: longer than one attempt (15 s). */
export const EXPORT_LEASE_SECONDS = 60
/**
 * Batches one tick sends at most, so that a long backlog still lets the lease and metric move; a
 * tick that sent them all is followed by the next at once (bench/README.md, usage export).
 */
const BATCHES_PER_TICK = 50

export interface UsageExporterOptions {
  sql: Sql
  log: FastifyBaseLogger
  url: string
  secret: string
  /** The events' `source` (ISSUER_URL). */
  source: string
  periodSeconds: number
  /** WEBHOOKS_RETRY_SCHEDULE: the waits after each failed attempt; the last repeats. */
  retrySchedule: RetrySchedule
  intervalMs?: number | undefined
  leaseSeconds?: number | undefined
  /** How long one attempt may take (default 15 s, as a webhook's). */
  timeoutMs?: number | undefined
  /** Told how far behind the push is after each tick, in seconds. */
  onLag?: (seconds: number) => void
}

/** A receiver's name in Postgres: its URL may carry a token, so only a digest is kept. */
export const exportTarget = (url: string) => createHash('sha256').update(url).digest('hex')

export class UsageExporter {
  /** This replica's name as the lease's holder. */
  readonly holder = randomUUID()
  private readonly target: string
  private timer: NodeJS.Timeout | null = null
  private running: Promise<void> | null = null
  private stopped = false
  /** The last round sent BATCHES_PER_TICK batches: more are waiting. */
  private backlog = false
  private readonly abort = new AbortController()
  private readonly options: UsageExporterOptions

  constructor(options: UsageExporterOptions) {
    this.options = options
    this.target = exportTarget(options.url)
  }

  start(): void {
    if (this.stopped || this.timer !== null) return
    this.timer = setTimeout(
      () => {
        this.timer = null
        void this.tick().finally(() => this.start())
      },
      this.backlog ? 0 : (this.options.intervalMs ?? EXPORT_INTERVAL_MS),
    )
    this.timer.unref()
  }

  /** One round now: claim the lease, push what is due, report the lag. Calls at once share one. */
  tick(): Promise<void> {
    this.running ??= this.round()
      .catch((err: unknown) => {
        this.backlog = false // a failed round waits the interval, never loops
        this.options.log.warn({ err }, 'usage export round failed; will retry')
      })
      .finally(() => {
        this.running = null
      })
    return this.running
  }

  private async round(): Promise<void> {
    const { sql } = this.options
    const lease = {
      target: this.target,
      holder: this.holder,
      leaseSeconds: this.options.leaseSeconds ?? EXPORT_LEASE_SECONDS,
    }
    this.backlog = false
    let cursor = this.stopped ? null : await claimExport(sql, lease)
    let batch = 0
    for (; cursor?.due === true && batch < BATCHES_PER_TICK && !this.stopped; batch++) {
      // One period a batch: its records are fixed once it is closed, so a batch sent again after
      // a lost acknowledgement holds the same records, and has the same webhook-id.
      const next = await recordsAfter(sql, cursor, EXPORT_BATCH_SIZE)
      const rows = next.filter((row) => row.period_start.getTime() === next[0]?.period_start.getTime())
      if (rows.length === 0) break
      const events = rows.map((row) => usageEvent(row, this.options.periodSeconds, this.options.source))
      const result = await postSigned(
        this.options.url,
        this.options.secret,
        {
          id: batchId(events.map((event) => event.id)),
          body: JSON.stringify(events),
          contentType: 'application/cloudevents-batch+json',
          userAgent: 'tenancy-gateway-usage-export',
        },
        { allowInsecure: true, signal: this.abort.signal, timeoutMs: this.options.timeoutMs },
      )
      if (result.error !== null) {
        if (this.stopped) break
        const attempts = cursor.attempts + 1
        const schedule = this.options.retrySchedule
        const delayMs = schedule[Math.min(attempts, schedule.length) - 1] ?? EXPORT_INTERVAL_MS
        await exportFailed(sql, lease, { attempts, delayMs, error: result.error })
        this.options.log.warn(
          { attempts, retryInMs: delayMs, error: result.error, records: rows.length },
          'usage export not acknowledged; will retry',
        )
        break
      }
      const last = rows[rows.length - 1]!
      if (!(await acknowledgeExport(sql, lease, last))) break // the lease went to another replica
      cursor = { period_start: last.period_start, tenant_id: last.tenant_id, meter: last.meter, attempts: 0, due: true }
    }
    this.backlog = batch === BATCHES_PER_TICK
    this.options.onLag?.(await this.lagSeconds())
  }

  /**
   * How far behind the push is: from the end of the oldest closed period with a record the
   * receiver has not acknowledged to now (0: none). The first record after the cursor, by index.
   */
  private async lagSeconds(): Promise<number> {
    const [next] = await recordsAfter(this.options.sql, await exportCursor(this.options.sql, this.target), 1)
    if (next === undefined) return 0
    return Math.max(0, (Date.now() - next.period_start.getTime()) / 1000 - this.options.periodSeconds)
  }

  /** Stops the timer, cuts an attempt under way short, and gives the lease up for another replica. */
  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer !== null) clearTimeout(this.timer)
    this.timer = null
    this.abort.abort()
    await this.running
    await releaseExport(this.options.sql, this.target, this.holder).catch((err: unknown) =>
      this.options.log.warn({ err }, 'usage export lease not given up; another replica takes it when it runs out'),
    )
  }
}

/**
 * A batch's `webhook-id`: the same records give the same id, so a receiver that dedupes messages
 * (Standard Webhooks) drops a batch sent again after its acknowledgement was lost.
 */
function batchId(eventIds: readonly string[]): string {
  return `usage_${createHash('sha256').update(eventIds.join('\n')).digest('base64url').slice(0, 32)}`
}
