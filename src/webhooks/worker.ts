// The webhook delivery worker (docs/events.md, Delivery), one in every replica. It claims due
// deliveries with FOR UPDATE SKIP LOCKED and a lease (store/webhook-deliveries.ts), so that each
// attempt is made by one replica; a replica that dies mid-attempt leaves the row to the others
// when the lease runs out. It looks for work when Postgres says deliveries were queued (NOTIFY,
// sent on commit), when one of its attempts ends, and every poll interval (a missed notice, a
// retry coming due).
import { randomUUID } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import { open } from '../encryption/seal.js'
import { presentEvent } from '../events/present.js'
import type { Sql } from '../store/db.js'
import { DELIVERIES_CHANNEL } from '../store/events.js'
import { inTransaction } from '../store/transaction.js'
import {
  type ClaimedDelivery,
  claimDueDeliveries,
  oldestDueAgeSeconds,
  releaseDeliveries,
  settleDelivery,
} from '../store/webhook-deliveries.js'
import { type AttemptOutcome, recordAttempt } from './attempt-outcome.js'
import { DELIVERY_TIMEOUT_MS, type DeliveryOptions, deliverWebhook } from './deliver.js'
import type { RetrySchedule } from './retry-schedule.js'
import { sealedSecretFor } from './signature.js'

export interface WorkerOptions {
  sql: Sql
  /** ENCRYPTION_KEY: opens the endpoints' secrets. */
  encryptionKey: Buffer
  schedule: RetrySchedule
  /** How deliveries are sent (WEBHOOKS_ALLOW_INSECURE; tests add a resolver or a CA). */
  delivery?: Omit<DeliveryOptions, 'now' | 'signal'>
  /** Attempts under way at once in this replica (default 128). */
  concurrency?: number
  /** Attempts under way at once to one endpoint, across every replica (default 16). */
  perEndpoint?: number
  /** Attempts under way at once to one parent's endpoints, across every replica (default 32). */
  perParent?: number
  /** Between looks for due deliveries when nothing else wakes the worker (default 1 s). */
  pollIntervalMs?: number
  /** How long a claim is this worker's: past the delivery timeout, or two replicas could send one attempt. */
  leaseMs?: number
  /** LISTEN for queued deliveries (not on the embedded database: it has one connection). */
  listen?: boolean
  /** The clock (ms since the epoch) for every time the worker writes or compares; tests move it. */
  clock?: () => number
  log?: FastifyBaseLogger
  onOutcome?: (outcome: AttemptOutcome) => void
}

export const DEFAULT_LEASE_MS = DELIVERY_TIMEOUT_MS + 15_000
/** One endpoint's share of the attempts under way, fleet-wide: a hanging receiver holds no more than this. */
export const DEFAULT_PER_ENDPOINT = 16
/** One parent's share over all its endpoints: more endpoints that hang do not take more slots. */
export const DEFAULT_PER_PARENT = 32
/**
 * A replica's slots: attempts wait on the network, not the CPU, so slots are cheap. Four parents'
 * shares, so that up to three parents whose receivers all hang still leave a share's worth of
 * slots to everyone else (at twice a share, two hanging parents held every slot until their 15 s
 * timeouts ran out).
 */
export const DEFAULT_CONCURRENCY = 4 * DEFAULT_PER_PARENT

export class DeliveryWorker {
  private readonly inFlight = new Map<string, { abort: AbortController; done: Promise<void> }>()
  private pumping: Promise<void> | null = null
  private wakeAgain = false
  private stopped = false
  private timer: NodeJS.Timeout | null = null
  private unlisten: (() => Promise<void>) | null = null
  private readonly clock: () => number

  private readonly options: WorkerOptions
  constructor(options: WorkerOptions) {
    this.options = options
    this.clock = options.clock ?? Date.now
  }

  async start(): Promise<void> {
    const interval = this.options.pollIntervalMs ?? 1_000
    this.timer = setInterval(() => this.wake(), interval).unref()
    if (this.options.listen !== false) {
      try {
        // The second callback runs on every (re)connection: notices sent while it was down are lost.
        const { unlisten } = await this.options.sql.listen(
          DELIVERIES_CHANNEL,
          () => this.wake(),
          () => this.wake(),
        )
        this.unlisten = unlisten
      } catch (err) {
        this.options.log?.warn({ err }, 'webhook worker cannot LISTEN; it polls every %d ms', interval)
      }
    }
    this.wake()
  }

  /** Looks for due deliveries now (or once more after the look under way). */
  wake(): void {
    if (this.stopped) return
    if (this.pumping !== null) {
      this.wakeAgain = true
      return
    }
    this.pumping = this.pump()
      .catch((err: unknown) => this.options.log?.warn({ err }, 'claiming webhook deliveries failed; retrying'))
      .finally(() => {
        this.pumping = null
        if (this.wakeAgain) {
          this.wakeAgain = false
          this.wake()
        }
      })
  }

  /** Seconds the oldest due delivery has waited, for the metric. */
  oldestDueSeconds(): Promise<number> {
    return oldestDueAgeSeconds(this.options.sql, new Date(this.clock()))
  }

  private async pump(): Promise<void> {
    const concurrency = this.options.concurrency ?? DEFAULT_CONCURRENCY
    while (!this.stopped) {
      const free = concurrency - this.inFlight.size
      if (free <= 0) return
      const now = this.clock()
      const claimed = await claimDueDeliveries(this.options.sql, {
        now: new Date(now),
        leaseUntil: new Date(now + (this.options.leaseMs ?? DEFAULT_LEASE_MS)),
        leaseToken: randomUUID(),
        limit: free,
        perEndpoint: this.options.perEndpoint ?? DEFAULT_PER_ENDPOINT,
        perParent: this.options.perParent ?? DEFAULT_PER_PARENT,
      })
      if (this.stopped) {
        // Stopped while claiming: hand them back at once rather than hold them for a lease.
        const ids = claimed.map((delivery) => delivery.id)
        await releaseDeliveries(this.options.sql, ids, claimed[0]?.leaseToken ?? '', new Date(this.clock()))
        return
      }
      for (const delivery of claimed) this.begin(delivery)
      // Fewer than asked can mean an endpoint reached its share: look again past it.
      if (claimed.length === 0) return
    }
  }

  private begin(delivery: ClaimedDelivery): void {
    const abort = new AbortController()
    const done = this.attempt(delivery, abort.signal)
      .catch((err: unknown) =>
        // Its lease runs out and another look (here or elsewhere) makes the attempt again.
        this.options.log?.warn({ err, delivery: delivery.id }, 'recording a webhook attempt failed'),
      )
      .finally(() => {
        this.inFlight.delete(delivery.id)
        this.wake()
      })
    this.inFlight.set(delivery.id, { abort, done })
  }

  private async attempt(delivery: ClaimedDelivery, signal: AbortSignal): Promise<void> {
    const { sql } = this.options
    if (!delivery.endpointActive || delivery.secretSealed === null) {
      // Disabled or deleted after the delivery was queued: nothing more is sent to it.
      await inTransaction(sql, (tx) => settleDelivery(tx, delivery, { state: 'cancelled' }))
      return
    }
    const secret = open(
      this.options.encryptionKey,
      delivery.secretSealed,
      sealedSecretFor(delivery.endpointId),
      'a webhook secret',
    ).toString('utf8')
    const attemptedAt = new Date(this.clock())
    const result = await deliverWebhook(delivery.url, secret, presentEvent(delivery.event), {
      ...this.options.delivery,
      now: () => new Date(this.clock()),
      signal,
    })
    if (signal.aborted && result.status === null) {
      // Stopping before an answer came: handed back undecided, for another replica to make at once.
      // An answer that came (its body cut short by the stop) is recorded: sending again would repeat it.
      await releaseDeliveries(sql, [delivery.id], delivery.leaseToken, new Date(this.clock()))
      return
    }
    const endedAt = new Date(this.clock())
    const outcome = await recordAttempt(sql, delivery, result, {
      schedule: this.options.schedule,
      attemptedAt,
      endedAt,
    })
    this.options.onOutcome?.(outcome)
    if (outcome === 'endpoint_disabled')
      this.options.log?.warn({ endpoint: delivery.endpointId, status: result.status }, 'webhook endpoint disabled')
  }

  /** No new claims; attempts under way are cut short and handed back. */
  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer !== null) clearInterval(this.timer)
    await this.pumping
    for (const { abort } of this.inFlight.values()) abort.abort()
    await Promise.all([...this.inFlight.values()].map(({ done }) => done))
    await this.unlisten?.().catch(() => {})
  }
}
