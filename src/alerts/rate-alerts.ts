// `rate_limit.exceeded` (docs/events.md, Alerts): the proxy counts rate refusals in memory, per
// tenant and policy; every second each replica adds its counts to Postgres, and whichever replica
// finds the tenant's window over (none yet, or the last event `windowMs` ago) writes the event
// with every refusal not reported yet, under the row's lock: at most one per window, each refusal
// in exactly one event. Refusals counted after an event wait for the window's end, when a replica
// that counted some writes them, if no new refusal did it first.
import type { FastifyBaseLogger } from 'fastify'
import { gatewayOrigin, recordEvent } from '../events/record.js'
import type { Rate } from '../limits/types.js'
import { accountOf, addRefusals, dueRateAlert, type RateAlertRow, rateAlertWritten } from '../store/alerts.js'
import type { Sql, Tx } from '../store/db.js'
import { inTransaction } from '../store/transaction.js'

export type RatePolicy = 'sub_account.rate' | 'account.rate' | 'sub_account.shadow.rate' | 'account.shadow.rate'

/** At most one event per tenant and policy in this long (docs/events.md#alerts: 5 minutes). */
export const RATE_ALERT_WINDOW_MS = 5 * 60_000

interface Pending {
  tenantId: string
  policy: RatePolicy
  refused: number
  /** The rate as this replica last refused under it, for the event. */
  rate: Rate
}

export interface RateAlertOptions {
  sql: Sql
  log: FastifyBaseLogger
  clock: () => number
  windowMs: number
}

export class RateAlerts {
  /** `<policy>:<tenant id>` → refusals not yet added to Postgres. */
  private pending = new Map<string, Pending>()
  /** Rows whose refusals wait for their window's end, and when it ends (this replica added to them). */
  private readonly waiting = new Map<string, { tenantId: string; policy: RatePolicy; rate: Rate; dueAt: number }>()

  private readonly options: RateAlertOptions
  constructor(options: RateAlertOptions) {
    this.options = options
  }

  /** A request refused by a rate policy: on the request path, a map update. */
  refused(tenantId: string, policy: RatePolicy, rate: Rate): void {
    const key = `${policy}:${tenantId}`
    const pending = this.pending.get(key)
    if (pending === undefined) this.pending.set(key, { tenantId, policy, refused: 1, rate })
    else {
      pending.refused++
      pending.rate = rate
    }
  }

  /** Adds this replica's counts to Postgres and writes the events that are due. */
  async flush(): Promise<void> {
    const taken = this.pending
    this.pending = new Map()
    if (taken.size > 0) {
      try {
        await this.add([...taken.values()].sort(byKey))
      } catch (err) {
        // Rolled back: nothing was added, so the counts go again with the next flush.
        this.options.log.warn({ err }, 'rate-limit alerts: adding refusals failed; will retry')
        for (const [key, pending] of taken) {
          const newer = this.pending.get(key)
          if (newer === undefined) this.pending.set(key, pending)
          else newer.refused += pending.refused
        }
      }
    }
    await this.writeDue()
  }

  private async add(counts: Pending[]): Promise<void> {
    const now = this.options.clock()
    const byTenant = new Map(counts.map((c) => [`${c.policy}:${c.tenantId}`, c]))
    const written: string[] = []
    await inTransaction(this.options.sql, async (tx) => {
      const rows = await addRefusals(tx, counts, new Date(now))
      for (const row of rows) {
        const key = `${row.policy}:${row.tenant_id}`
        const pending = byTenant.get(key)!
        if (row.last_event_at === null || row.last_event_at.getTime() <= now - this.options.windowMs) {
          await this.write(tx, row, pending.rate, now)
          written.push(key)
        } else {
          const dueAt = row.last_event_at.getTime() + this.options.windowMs
          this.waiting.set(key, { tenantId: row.tenant_id, policy: pending.policy, rate: pending.rate, dueAt })
        }
      }
    })
    for (const key of written) this.waiting.delete(key)
  }

  /** Rows this replica added to whose window has ended: their refusals are reported (once). */
  private async writeDue(): Promise<void> {
    const now = this.options.clock()
    for (const [key, row] of this.waiting) {
      if (row.dueAt > now) continue
      try {
        await inTransaction(this.options.sql, async (tx) => {
          const due = await dueRateAlert(tx, row.tenantId, row.policy, new Date(now - this.options.windowMs))
          if (due !== null) await this.write(tx, due, row.rate, now)
        })
        this.waiting.delete(key)
      } catch (err) {
        this.options.log.warn({ err }, 'rate-limit alerts: writing a due event failed; will retry')
      }
    }
  }

  private async write(tx: Tx, row: RateAlertRow, rate: Rate, now: number): Promise<void> {
    const accountId = await accountOf(tx, row.tenant_id)
    if (accountId !== null) {
      const at = new Date(now).toISOString()
      await recordEvent(tx, gatewayOrigin, {
        accountId,
        type: 'rate_limit.exceeded',
        target: { type: row.policy.startsWith('account.') ? 'account' : 'sub_account', id: row.tenant_id },
        object: {
          policy: row.policy,
          tenant_id: row.tenant_id,
          rate: { requests: rate.requests, per_seconds: rate.perSeconds },
          refused: Number(row.refused),
          since: row.counting_since.toISOString(),
          until: at,
          window_seconds: this.options.windowMs / 1000,
        },
        previous: null,
        // A shadow rate's: what it would have refused (docs/api.md, Shadow limits).
        ...(row.policy.includes('.shadow.') ? { shadow: true as const } : {}),
      })
    }
    await rateAlertWritten(tx, row.tenant_id, row.policy, new Date(now))
  }
}

const byKey = (a: Pending, b: Pending) =>
  a.tenantId < b.tenantId ? -1 : a.tenantId > b.tenantId ? 1 : a.policy < b.policy ? -1 : a.policy > b.policy ? 1 : 0
