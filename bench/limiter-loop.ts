// The limiter's own work for one request, without HTTP: `isWarm`, `admit` and `charge` of a warm
// subject in a loop, against the bench's Redis (leases renewed as the gateway renews them), for a
// sub-account under a required credit (10^12 granted), a rate, and a monthly quota. What a request
// of the proxy pays the limiter, beside the 50 to 60 µs of CPU the whole request costs
// (bench:proxy). bench/README.md.
import { Redis } from '../src/cache/ioredis.js'
import { Limiter } from '../src/limits/limiter.js'
import type { Limits, LimitSubject } from '../src/limits/types.js'
import { envInt, median, REDIS_URL, reportHead, run } from './lib.js'

const CALLS = envInt('BENCH_CALLS', 200_000)
const ROUNDS = envInt('BENCH_ROUNDS', 6)
const TENANT = '3f1d2c4e-1111-4222-8333-444455556666'
/** The answer's report: 42 units of the credit's meter. */
const REPORTED = new Map([['tokens', 42]])

const NONE = { rate: null, monthlyQuota: null } as const
const SIDES: Record<string, Limits> = {
  credit: {
    ...NONE,
    credits: [
      { meter: 'tokens', settled: 0, live: [{ units: 1e12, left: 1e12, expiresAt: null }], lowThresholdPercent: 10 },
    ],
  },
  rate: { ...NONE, rate: { requests: 1e9, perSeconds: 1 } },
  quota: { ...NONE, monthlyQuota: { requests: 1e12 } },
}

run(async () => {
  const redis = new Redis(REDIS_URL)
  const keyPrefix = `bench-limiter-loop-${process.pid}:`
  const limiter = new Limiter({ redis: redis as never, keyPrefix, loadMonthUse: async () => 0 })
  try {
    const micros: Record<string, number[]> = Object.fromEntries(Object.keys(SIDES).map((side) => [side, []]))
    for (let round = 0; round <= ROUNDS; round++)
      for (const [side, limits] of Object.entries(SIDES)) {
        const subjects: LimitSubject[] = [{ tenantId: TENANT, level: 'sub_account', limits }]
        const started = performance.now()
        for (let call = 0; call < CALLS; call++) {
          if (!limiter.isWarm(subjects, 1)) await limiter.admitWhenWarm(subjects, undefined, 1)
          else if (!limiter.admit(subjects, 1).allowed) throw new Error(`${side}: refused`)
          limiter.charge(subjects, REPORTED)
          // Let the lease calls' answers in, as requests between them would.
          if (call % 1000 === 999) await new Promise((resolve) => setImmediate(resolve))
        }
        // The first round warms the JIT up, uncounted.
        if (round > 0) micros[side]!.push(((performance.now() - started) * 1000) / CALLS)
      }
    console.log(
      [
        ...reportHead('bench:limiter-loop'),
        `loop      ${CALLS.toLocaleString('en')} calls of isWarm + admit + charge a side, ${ROUNDS} rounds after one uncounted, the sides in turn`,
        '',
        ...Object.entries(micros).map(
          ([side, m]) =>
            `${side.padEnd(7)} ${median(m).toFixed(3)} µs a call (median); rounds ${m.map((x) => x.toFixed(3)).join(', ')}`,
        ),
      ].join('\n'),
    )
  } finally {
    await limiter.close()
    const keys = await redis.keys(`${keyPrefix}*`)
    if (keys.length > 0) await redis.del(...keys)
    redis.disconnect()
  }
})
