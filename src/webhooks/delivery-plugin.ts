// The webhook delivery worker (webhooks/worker.ts) as a plugin: started with the app, stopped
// when it closes (attempts under way are handed back to the other replicas), and its backlog in
// the metrics.
import fp from 'fastify-plugin'
import { DeliveryWorker, type WorkerOptions } from './worker.js'

declare module 'fastify' {
  interface FastifyInstance {
    webhookWorker: DeliveryWorker
  }
}

export type WebhookDeliveryPluginOptions = Omit<WorkerOptions, 'log' | 'onOutcome'>

export const webhookDeliveryPlugin = fp<WebhookDeliveryPluginOptions>(
  async (app, options) => {
    const metrics = app.metrics.webhooks
    const worker = new DeliveryWorker({ ...options, log: app.log, onOutcome: (outcome) => metrics.attempted(outcome) })
    metrics.oldestDueSeconds = () => worker.oldestDueSeconds()
    app.decorate('webhookWorker', worker)
    // Started once the app is ready, so that a build that fails half-way leaves nothing running.
    app.addHook('onReady', () => worker.start())
    app.addHook('onClose', () => worker.stop())
  },
  { name: 'webhook-delivery', dependencies: ['metrics'] },
)
