// The alerts (docs/events.md, Alerts) as a plugin: every second, this replica's rate refusals go to
// Postgres and the quotas it holds are checked against their thresholds; every few minutes, keys
// near their expiry are swept. All of it off the request path, which only counts refusals in memory.
// Decorates `app.alerts`; the timers stop, and the last refusals are added, when the app closes.
import fp from 'fastify-plugin'
import type { Sql } from '../store/db.js'
import { CreditAlerts } from './credit-alerts.js'
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
  credits: CreditAlerts
  /** One check now: the rate refusals, then the quotas (what the timer does every second). */
  check(): Promise<void>
  /** A key was minted or rolled to end at `expiresAt`: within a mark, keys are swept within a second. */
  keyMinted(expiresAt: Date | null): void
}

/** How soon keys are swept after a key is minted within a mark (mints in a burst share the sweep). */
const SWEEP_SOON_MS = 500

export const alertsPlugin = fp<AlertsPluginOptions>(
  async (app, options) => {
    const { sql, clock = Date.now } = options
    const log = app.log
    const rate = new RateAlerts({ sql, log, clock, windowMs: options.rateWindowMs ?? RATE_ALERT_WINDOW_MS })
    const quota = new QuotaAlerts({ sql, log, limiter: app.limiter, thresholds: DEFAULT_QUOTA_THRESHOLDS })
    const keys = new KeyExpiryAlerts({ sql, log, clock })
    const credits = new CreditAlerts({ sql, log, limiter: app.limiter })

    // One check at a time: a call while one runs waits for it, then makes its own (it may have
    // something the running one began too early to see).
    let checking: Promise<void> | null = null
    const check = (): Promise<void> => {
      if (checking !== null) return checking.then(check, check)
      const run = (async () => {
        try {
          await rate.flush()
          await quota.check()
          await credits.check()
        } finally {
          checking = null
        }
      })()
      checking = run
      return run
    }

    let stopped = false
    const checkTimer = setInterval(() => {
      check().catch((err: unknown) => log.warn({ err }, 'alerts: check failed; the next one retries'))
    }, options.checkIntervalMs ?? 1_000).unref()
    // One chain of sweeps: each schedules the next, sooner when a key was minted within a mark
    // meanwhile (one running may have read the keys before it).
    let sweepTimer: NodeJS.Timeout | null = null
    let sweeping: Promise<unknown> | null = null
    let soon = false
    const schedule = (ms: number) => {
      if (sweepTimer !== null) clearTimeout(sweepTimer)
      sweepTimer = setTimeout(sweep, ms).unref()
    }
    const sweep = () => {
      sweepTimer = null
      soon = false
      sweeping = keys
        .sweep()
        .catch((err: unknown) => log.warn({ err }, 'alerts: sweeping expiring keys failed; the next sweep retries'))
        .finally(() => {
          sweeping = null
          if (!stopped) schedule(soon ? SWEEP_SOON_MS : (options.keySweepIntervalMs ?? 300_000))
        })
    }
    const keyMinted = (expiresAt: Date | null) => {
      if (stopped || soon || !keys.withinMark(expiresAt)) return
      soon = true
      if (sweeping === null) schedule(SWEEP_SOON_MS)
    }
    app.decorate('alerts', { rate, quota, keys, credits, check, keyMinted })
    app.addHook('onReady', () => {
      if (sweepTimer === null && sweeping === null) schedule(options.firstKeySweepAfterMs ?? 30_000)
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
