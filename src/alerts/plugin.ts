// The alerts (docs/events.md, Alerts) as a plugin: every second, this replica's rate refusals go to
// Postgres and the quotas it holds are checked against their thresholds; every few minutes, keys
// near their expiry are swept. All of it off the request path, which only counts refusals in memory.
// Decorates `app.alerts`; the timers stop, and the last refusals are added, when the app closes.
import fp from 'fastify-plugin'
import type { Sql } from '../store/db.js'
import { KeyExpiryAlerts } from './key-expiry-alerts.js'
import { DEFAULT_QUOTA_THRESHOLDS, QuotaAlerts } from './quota-alerts.js'
import { RATE_ALERT_WINDOW_MS, RateAlerts } from './rate-alerts.js'

declare module 'fastify' {
  interface FastifyInstance {
    alerts: Alerts
  }
}

export interface AlertTimings {
  /** Between checks of rate refusals and quotas (default 1 s, as the usage meter flushes). */
  checkIntervalMs?: number
  /** At most one `rate_limit.exceeded` per tenant and policy in this long (default 5 min). */
  rateWindowMs?: number
  /** Between sweeps of expiring keys (default 5 min), and before the first (default 30 s). */
  keySweepIntervalMs?: number
  firstKeySweepAfterMs?: number
  /** The alerts' clock (ms since the epoch): a rate window's and a key's marks; tests move it. */
  clock?: () => number
}

export interface AlertsPluginOptions extends AlertTimings {
  sql: Sql
}

export interface Alerts {
  rate: RateAlerts
  quota: QuotaAlerts
  keys: KeyExpiryAlerts
  /** One check now: the rate refusals, then the quotas (what the timer does every second). */
  check(): Promise<void>
}

export const alertsPlugin = fp<AlertsPluginOptions>(
  async (app, options) => {
    const { sql, clock = Date.now } = options
    const log = app.log
    const rate = new RateAlerts({ sql, log, clock, windowMs: options.rateWindowMs ?? RATE_ALERT_WINDOW_MS })
    const quota = new QuotaAlerts({ sql, log, limiter: app.limiter, thresholds: DEFAULT_QUOTA_THRESHOLDS })
    const keys = new KeyExpiryAlerts({ sql, log, clock })

    // One check at a time: a call while one runs waits for it, then makes its own (it may have
    // something the running one began too early to see).
    let checking: Promise<void> | null = null
    const check = (): Promise<void> => {
      if (checking !== null) return checking.then(check, check)
      const run = (async () => {
        try {
          await rate.flush()
          await quota.check()
        } finally {
          checking = null
        }
      })()
      checking = run
      return run
    }
    app.decorate('alerts', { rate, quota, keys, check })

    let stopped = false
    const checkTimer = setInterval(() => {
      check().catch((err: unknown) => log.warn({ err }, 'alerts: check failed; the next one retries'))
    }, options.checkIntervalMs ?? 1_000).unref()
    let sweepTimer: NodeJS.Timeout | null = null
    let sweeping: Promise<unknown> | null = null
    const sweep = () => {
      sweeping = keys
        .sweep()
        .catch((err: unknown) => log.warn({ err }, 'alerts: sweeping expiring keys failed; the next sweep retries'))
        .finally(() => {
          sweeping = null
          if (!stopped) sweepTimer = setTimeout(sweep, options.keySweepIntervalMs ?? 300_000).unref()
        })
    }
    app.addHook('onReady', () => {
      sweepTimer = setTimeout(sweep, options.firstKeySweepAfterMs ?? 30_000).unref()
    })

    // Runs before the limiter's and the meter's (onClose hooks run last registered first).
    app.addHook('onClose', async () => {
      stopped = true
      clearInterval(checkTimer)
      if (sweepTimer !== null) clearTimeout(sweepTimer)
      await sweeping
      await check().catch((err: unknown) => log.warn({ err }, 'alerts: last check failed'))
    })
  },
  { name: 'alerts', dependencies: ['limits'] },
)
