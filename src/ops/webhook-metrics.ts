// The webhook workers' metrics (docs/operations.md): attempts by outcome, and how long the oldest
// due delivery has waited, which grows when the workers fall behind or cannot reach receivers.
import { Counter, Gauge, type Registry } from 'prom-client'
import { ATTEMPT_OUTCOMES, type AttemptOutcome } from '../webhooks/attempt-outcome.js'

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
      const age = await metrics.oldestDueSeconds().catch(() => null)
      if (age !== null) this.set(age)
    },
  })
  return metrics
}
