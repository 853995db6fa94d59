// The gateway's Prometheus metrics (docs/operations.md) as a plugin: decorates the app with them,
// and feeds the pool gauges from the store.
import fp from 'fastify-plugin'
import { createMetrics, type Metrics } from './metrics.js'
import { connectionsByState } from '../store/activity.js'
import type { Store } from '../store/db.js'

declare module 'fastify' {
  interface FastifyInstance {
    metrics: Metrics
  }
}

export interface MetricsPluginOptions {
  store: Store
  /** Where to count (main.ts serves its registry on METRICS_PORT); a registry of its own by default. */
  metrics?: Metrics | undefined
}

export const metricsPlugin = fp<MetricsPluginOptions>(
  async (app, { store, metrics = createMetrics() }) => {
    const connections = () => connectionsByState(store)
    metrics.postgresConnections = connections
    if (store.pool !== undefined) metrics.postgresPoolMax.set(store.pool.max)
    app.decorate('metrics', metrics)

    // The registry may outlive the app (main.ts serves it until the process ends): a scrape after
    // the close no longer asks the app's store about its connections.
    app.addHook('onClose', async () => {
      if (metrics.postgresConnections === connections) metrics.postgresConnections = async () => null
    })
  },
  { name: 'metrics' },
)
