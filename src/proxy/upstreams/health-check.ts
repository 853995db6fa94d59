// Active health (docs/configuration.md, routes: `health_check`): each replica sends a GET of the
// route's check path to every target, every interval_ms give or take a tenth (jitter, so that
// replicas started together do not check in step), over a connection of the target's own: a target
// whose pool is taken by long answers (streams, long polls) is busy, not down, and a check queued
// behind them would time out. A target fails `unhealthy_after` checks in a row to be taken out
// and passes `healthy_after` to come back; a target starts healthy, so that a fresh replica
// serves at once. Timers are unref'd and end with
// close(): the route's scope closes them with its pools (proxy/plugin.ts).
import type { Dispatcher } from 'undici'
import type { HealthCheckOptions } from './route-options.js'

/** What a check reads and writes of a target. */
export interface Checked {
  /** The checks' own pool of one connection (null: none is made without checks). */
  readonly checkPool: Dispatcher | null
  readonly host: string
  /** False once it failed unhealthy_after checks in a row, until it passes healthy_after. */
  healthy: boolean
}

/** Whether a check's status passes: one of `statuses`, or any 2xx without them. */
export function passes(options: HealthCheckOptions, status: number): boolean {
  return options.statuses === null ? status >= 200 && status < 300 : options.statuses.includes(status)
}

export class HealthChecks {
  private readonly timers = new Set<NodeJS.Timeout>()
  private closed = false

  private readonly options: HealthCheckOptions
  /** A target's `healthy` changed. */
  private readonly changed: () => void
  constructor(options: HealthCheckOptions, targets: readonly Checked[], changed: () => void = () => {}) {
    this.options = options
    this.changed = changed
    for (const target of targets) this.schedule(target, { passed: 0, failed: 0 })
  }

  /** Stops every check; one in flight ends with its pool. */
  close(): void {
    this.closed = true
    for (const timer of this.timers) clearTimeout(timer)
    this.timers.clear()
  }

  private schedule(target: Checked, streak: { passed: number; failed: number }): void {
    if (this.closed) return
    const delay = this.options.intervalMs * (0.9 + Math.random() * 0.2)
    const timer = setTimeout(() => {
      this.timers.delete(timer)
      this.check(target).then((ok) => {
        const was = target.healthy
        if (ok) {
          streak.failed = 0
          if (++streak.passed >= this.options.healthyAfter) target.healthy = true
        } else {
          streak.passed = 0
          if (++streak.failed >= this.options.unhealthyAfter) target.healthy = false
        }
        if (target.healthy !== was) this.changed()
        this.schedule(target, streak)
      })
    }, delay)
    timer.unref()
    this.timers.add(timer)
  }

  /** One check: true when the target answered a passing status within timeout_ms. Never rejects. */
  private async check(target: Checked): Promise<boolean> {
    const pool = target.checkPool
    if (pool === null) return false
    try {
      const answer = await pool.request({
        method: 'GET',
        path: this.options.path,
        headers: { host: target.host, 'user-agent': 'tenancy-gateway-health-check' },
        signal: AbortSignal.timeout(this.options.timeoutMs),
      })
      await answer.body.dump()
      return passes(this.options, answer.statusCode)
    } catch {
      // Refused, reset, timed out, or the pool closed: a failed check, whatever the cause.
      return false
    }
  }
}
