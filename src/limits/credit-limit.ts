// A sub-account's prepaid credits of one meter as one replica holds them (docs/api.md, Credits): a
// quota that does not renew monthly and that grants feed. M is what the grants give (credited,
// below); the use is every unit burned, counted in Redis as a quota's month is and rebuilt from
// Postgres the same way (the usage meter's flush burns grants in the statement that writes the
// units: store/usage.ts). Redis's key still names the month, so that it is read again from
// Postgres each month, which holds the whole count.
import type { LimitContext } from './lease-terms.js'
import { QuotaLimit } from './quota-limit.js'
import type { CreditBalance, Level, PolicyName, PolicyState, QuotaUse } from './types.js'

/** The units burned from a sub-account's grants of a meter, and its debt: the credits' use. */
export type LoadCreditUse = (subject: { tenantId: string; meter: string }) => Promise<number>

/**
 * What the grants give at `now`: those voided or expired when read gave what was burned from them;
 * a live one gives its units until its expiry, then what was burned from it as far as the replica
 * knows (its `left` when read: later burns only lower it, so this is never above the truth, and is
 * exact once the record is read again).
 */
export function credited(balance: CreditBalance, now: number): number {
  let units = balance.settled
  for (const grant of balance.live)
    units += grant.expiresAt === null || now < grant.expiresAt ? grant.units : grant.units - grant.left
  return units
}

export class CreditLimit extends QuotaLimit {
  balance: CreditBalance
  private readonly tenantId: string
  constructor(
    name: PolicyName,
    ctx: LimitContext,
    now: number,
    balance: CreditBalance,
    subject: { tenantId: string; level: Level },
    keyOf: (month: string) => string,
    loadCreditUse: LoadCreditUse,
  ) {
    super(name, ctx, now, credited(balance, now), { ...subject, meter: balance.meter }, keyOf, (who) =>
      loadCreditUse({ tenantId: who.tenantId, meter: who.meter }),
    )
    this.balance = balance
    this.tenantId = subject.tenantId
  }

  /** A grant that expired since the last decision takes its rest with it, here as on every replica. */
  protected override sync(now: number): void {
    const units = credited(this.balance, now)
    if (units !== this.requests) {
      this.requests = units
      this.changed(now)
    }
    super.sync(now)
  }

  /** The sub-account and meter, and what its live grants give now. */
  credit(): { tenantId: string; meter: string; granted: number } {
    const now = this.ctx.now()
    let granted = 0
    for (const grant of this.balance.live) if (grant.expiresAt === null || now < grant.expiresAt) granted += grant.units
    return { tenantId: this.tenantId, meter: this.meter, granted }
  }

  /** The balance as this replica knows it (0 before the first answer). */
  left(now: number): number {
    return this.state(now).remaining
  }

  /** Credits write no usage.threshold_reached: their own events say when they run low. */
  override use(): QuotaUse | null {
    return null
  }

  /** Not a RateLimit field (the limiter lists none for credits); the balance as known, for the record. */
  override state(now: number): PolicyState {
    return { ...super.state(now), resetSeconds: 0 }
  }

  /** Credits come back with a grant, not with time: nothing to wait for. */
  override retryAfterMs(): number {
    return 0
  }
}
