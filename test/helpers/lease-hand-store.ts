// A lease store in memory whose answers the test gives by hand (src/limits/lease-store.ts), so that
// every call the limiter makes, and its arguments, show: test/unit/limits-*.test.ts.
import type { LeaseStore, QuotaAnswer, QuotaCall, RateAnswer, RateCall } from '../../src/limits/lease-store.js'
import { Limiter } from '../../src/limits/limiter.js'
import type { CreditBalance, LimitSubject } from '../../src/limits/types.js'

interface Pending<C, A> {
  call: C
  answer(a: A): void
  fail(err: Error): void
}

/** A store whose calls wait until the test answers them. */
export class HandStore implements LeaseStore {
  readonly ttlMs = 2_000
  readonly rates: Pending<RateCall, RateAnswer>[] = []
  readonly quotas: Pending<QuotaCall, QuotaAnswer>[] = []
  rate(call: RateCall): Promise<RateAnswer> {
    return new Promise((answer, fail) => this.rates.push({ call, answer, fail }))
  }
  quota(call: QuotaCall): Promise<QuotaAnswer> {
    return new Promise((answer, fail) => this.quotas.push({ call, answer, fail }))
  }
  /** Closes the limiter, answering the calls that gives back. */
  async close(limiter: Limiter): Promise<void> {
    const closing = limiter.close()
    for (let i = 0; i < 5; i++) {
      await flush()
      for (const p of this.rates.splice(0)) p.answer({ granted: 0, tokens: 0, waitMs: 0, inGrace: false, epoch: 'e' })
      for (const p of this.quotas.splice(0))
        p.answer({ rebuild: false, granted: 0, used: 0, waitMs: 0, epoch: '', inGrace: false })
    }
    await closing
  }

  /** Answers the oldest rate call and lets its continuation run. */
  async rateAnswer(granted: number, tokens = 0, waitMs = 0): Promise<RateCall> {
    const pending = this.rates.shift()
    if (pending === undefined) throw new Error('no rate call waits')
    pending.answer({ granted, tokens, waitMs, inGrace: false, epoch: 'e' })
    await flush()
    return pending.call
  }
}

export const flush = () => new Promise((resolve) => setImmediate(resolve))

/**
 * A limiter whose limits lease from a HandStore, on the test's clock, swept only by hand. A request
 * waits for a lease on a real timer: 10 s here (300 ms in production), so that a loaded machine
 * never ends a wait before the test answers; a test of the end of a wait names its own.
 */
export function limiterOnHand(now: () => number): { limiter: Limiter; store: HandStore } {
  const store = new HandStore()
  const limiter = new Limiter({
    redis: null,
    store,
    keyPrefix: 'p:',
    loadMonthUse: async () => 0,
    now,
    sweepEveryMs: 0,
    warmWaitMs: 10_000,
  })
  return { limiter, store }
}

/** Sub-account `sub-1`, whose only limit is a credit of `tokens` from these grants. */
export function creditedSubject(live: CreditBalance['live']): LimitSubject {
  return {
    tenantId: 'sub-1',
    level: 'sub_account',
    limits: {
      rate: null,
      monthlyQuota: null,
      credits: [{ meter: 'tokens', settled: 0, live, lowThresholdPercent: 10 }],
    },
  }
}
