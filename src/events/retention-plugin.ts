// Deletes events past EVENTS_RETENTION_DAYS in the background (events/retention.ts), stopped
// when the app closes.
import fp from 'fastify-plugin'
import { EventRetention, type RetentionOptions } from './retention.js'

declare module 'fastify' {
  interface FastifyInstance {
    eventRetention: EventRetention
  }
}

export const eventRetentionPlugin = fp<Omit<RetentionOptions, 'log'>>(
  async (app, options) => {
    const retention = new EventRetention({ ...options, log: app.log })
    retention.start()
    app.decorate('eventRetention', retention)
    app.addHook('onClose', () => retention.stop())
  },
  { name: 'event-retention' },
)
