// The webhook workers' metrics (docs/operations.md): attempts by outcome, and how long the oldest
// due delivery has waited, which grows when the workers fall behind or cannot reach receivers.
import { Counter, Gauge, type Registry } from 'prom-client'
import { withDeadline } from '../store/db.js'
import { ATTEMPT_OUTCOMES, type AttemptOutcome } from '../webhooks/attempt-outcome.js'

/**
 * How long a scrape waits for the oldest due delivery's age (as for tgw_postgres_connections,
 * store/activity.ts): a Postgres that does not answer must not hold /metrics past Prometheus's
 * scrape timeout (10 s by default), which would lose every other metric with it.
 */
export const OLDEST_DUE_DEADLINE_MS = 1_000

export interface WebhookMetrics {
  /** Counts one attempt by how it ended. */
  attempted(outcome: AttemptOutcome): void
  /** Set by the delivery plugin: seconds since the oldest due delivery became due, read at scrape time. */
  oldestDueSeconds: () => Promise<number | null>
}

export function webhookMetrics(registers: Registry[]): WebhookMetrics {
  const attempts = new Counter({
    name: 'tgw_webhook_deliveries_total',
    help: 'Webhook delivery attempts by outcome (succeeded, retrying, gave_up, endpoint_disabled)',
    labelNames: ['outcome'] as const,
    registers,
  })
  const byOutcome = new Map(ATTEMPT_OUTCOMES.map((outcome) => [outcome, attempts.labels(outcome)]))
  const metrics: WebhookMetrics = {
    attempted: (outcome) => byOutcome.get(outcome)!.inc(),
    oldestDueSeconds: async () => null,
  }
  new Gauge({
    name: 'tgw_webhook_oldest_due_seconds',
    help: 'Seconds since the oldest due webhook delivery became due (0 when none waits), at scrape time',
    registers,
    async collect() {
      // Not read in time, or not at all: the last value read stays (the query is left to end on its own).
      const age = await withDeadline(metrics.oldestDueSeconds(), OLDEST_DUE_DEADLINE_MS).catch(() => null)
      if (age !== null) this.set(age)
    },
  })
  return metrics
}
