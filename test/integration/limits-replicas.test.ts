// The limiter (src/limits/) as three replicas sharing the machine's Redis: a rate offered twice
// over, and a quota spent from two replicas whatever the interleaving (docs/internals.md, limits).
import t from 'tap'
import { limitKeys } from '../../src/limits/keys.js'
import type { LimitSubject } from '../../src/limits/types.js'
import { agedRedis, DegradedSpells, offer, replicas, worstWindow } from '../helpers/limits.js'
import { sleep } from '../helpers/poll.js'
import { REDIS_URL, redisClient, redisPrefix, requireRedis } from '../helpers/redis.js'

await requireRedis()
const prefix = redisPrefix(t)
const redis = redisClient(t)
await agedRedis(redis, prefix)

const subject = (tenantId: string, limits: Partial<LimitSubject['limits']>): LimitSubject => ({
  tenantId,
  level: 'sub_account',
  limits: { rate: null, monthlyQuota: null, ...limits },
})

t.test('a rate offered twice over, spread over 3 replicas: never over, at least 95 % once warm', async (t) => {
  const rate = { requests: 100, perSeconds: 1 }
  const subjects = [subject('rate-1', { rate })]
  // This measures how the replicas share a rate, not how fast Redis answers: a busy machine can
  // keep Redis from answering within a lease call's 250 ms, and a replica whose call timed out
  // enforces the rate alone (degraded), as it should.
  const spells = new DegradedSpells()
  const limiters = replicas(t, 3, { url: REDIS_URL, prefix, timings: { callTimeoutMs: 2_000 }, spells })
  await Promise.all(limiters.map((limiter) => limiter.warm(subjects)))
  t.ok(
    limiters.every((limiter) => limiter.isWarm(subjects)),
    'warm before the first request',
  )
  const run = await offer(2 * rate.requests, 5_000, (i) => limiters[i % 3]!, subjects)
  const worst = worstWindow(run.admitted, rate, run.admittedFrom)
  // Instants are read after the admission, within the same ms: 1 ms of slack in the bound.
  t.ok(worst.excess <= rate.requests / 1000, `worst window: ${worst.count} in ${worst.seconds.toFixed(3)} s`)
  const warm = run.admitted.filter((at) => at - run.start >= 1_000).length
  const allowed = (rate.requests * 4) / rate.perSeconds
  t.comment(
    `offered ${run.offered}, admitted ${run.admitted.length}; after the first second ${warm} of ${allowed} ` +
      `(${((100 * warm) / allowed).toFixed(1)} %); worst window ${worst.count} in ${worst.seconds.toFixed(3)} s ` +
      `(bound ${(rate.requests + (rate.requests * worst.seconds) / rate.perSeconds).toFixed(1)})`,
  )
  t.ok(warm >= 0.95 * allowed, `${warm} of ${allowed} admitted once warm`)
  t.equal(spells.count, 0, 'Redis answered throughout: no replica was ever degraded')
})

t.test('a quota spent from two replicas: exactly M pass, whatever the interleaving', async (t) => {
  const quota = 500
  const patterns: [string, (i: number) => number][] = [
    ['alternating', (i) => i % 2],
    ['random', () => (Math.random() < 0.5 ? 0 : 1)],
    ['in runs of 37', (i) => Math.floor(i / 37) % 2],
    ['mostly one', () => (Math.random() < 0.9 ? 0 : 1)],
  ]
  for (const [name, pick] of patterns) {
    const subjects = [subject(`quota-${name}`, { monthlyQuota: { requests: quota } })]
    const limiters = replicas(t, 2, { url: REDIS_URL, prefix })
    await Promise.all(limiters.map((limiter) => limiter.warm(subjects)))
    // 4,000 a second until nothing has passed for 300 ms.
    let admitted = 0
    let lastPass = Date.now()
    for (let i = 0; Date.now() - lastPass < 300; i++) {
      if (limiters[pick(i)]!.admit(subjects).allowed) {
        admitted++
        lastPass = Date.now()
      }
      if (i % 4 === 0) await sleep(1)
    }
    const key = limitKeys.quota(prefix, `sub_account:quota-${name}`, new Date().toISOString().slice(0, 7))
    t.equal(admitted, quota, `${name}: ${admitted} passed`)
    t.equal(Number(await redis.hget(key, 'used')), quota, `${name}: Redis counted them`)
    await Promise.all(limiters.map((limiter) => limiter.close()))
  }
})

t.test('a lease held unspent counts against the bucket while it refills', async (t) => {
  const rate = { requests: 100, perSeconds: 1 }
  const subjects = [subject('held', { rate })]
  // No sweep: the idle replica keeps its whole lease (2 s) instead of shrinking it after 1 s.
  const [idle, busy] = replicas(t, 2, { url: REDIS_URL, prefix, sweepEveryMs: 0 })
  await idle!.warm(subjects)
  const held = idle!.admit(subjects).policies[0]!.remaining
  idle!.refund(subjects)
  await busy!.warm(subjects)
  await offer(1_000, 200, () => busy!, subjects)
  await sleep(1_300) // the bucket refills to what the idle lease leaves of N
  const burst = await offer(5_000, 200, (i) => (i < 20 ? idle! : busy!), subjects)
  const worst = worstWindow(burst.admitted, rate, burst.admittedFrom)
  t.comment(`${burst.admitted.length} passed in the burst after the refill (idle replica's lease: ${held})`)
  t.ok(worst.excess <= rate.requests / 1000, `worst window ${worst.count} in ${worst.seconds.toFixed(3)} s`)
})
