// The process's own metrics: prom-client's defaults (CPU, memory, heap, event loop lag, GC,
// handles, requests and resources), less the three gauges it names `_total`. In Prometheus's
// naming `_total` ends a counter only, and `promtool check metrics` refuses a gauge that has it.
// Each of the three is the sum of a gauge by `type` that stays (docs/operations.md).
import { collectDefaultMetrics, type Registry } from 'prom-client'

/** Left out: `sum(nodejs_active_handles)` (and so on) says the same. */
export const DROPPED_DEFAULT_METRICS = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
] as const

export function collectProcessMetrics(registry: Registry): void {
  collectDefaultMetrics({ register: registry })
  for (const name of DROPPED_DEFAULT_METRICS) registry.removeSingleMetric(name)
}
