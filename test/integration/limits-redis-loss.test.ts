// The limiter (src/limits/) when Redis loses its keys or goes away, on a redis-server of the
// test's own: a quota rebuilt from the month's use with no extra request, each replica on its own
// while Redis is down, and back to shared leases after (docs/internals.md, limits).
//
// Postgres is not part of the limiter: `loadMonthUse` is a plain function here that returns what
// the test admitted, which is what the gateway's usage table holds once its counts are flushed.
import t from 'tap'
import type { LimitSubject } from '../../src/limits/types.js'
import { agedRedis, DegradedSpells, offer, preciseNow, replicas, worstWindow } from '../helpers/limits.js'
import { startRedis } from '../helpers/own-redis.js'
import { eventually, sleep } from '../helpers/poll.js'
import { redisClient } from '../helpers/redis.js'

const server = await startRedis(t)
const admin = redisClient(t, { url: server.url })
const prefix = 'loss:'

const subject = (tenantId: string, limits: Partial<LimitSubject['limits']>): LimitSubject => ({
  tenantId,
  level: 'account',
  limits: { rate: null, monthlyQuota: null, ...limits },
})

t.test('FLUSHDB near the end of a quota: rebuilt from the month, no extra request passes', async (t) => {
  await agedRedis(admin, prefix)
  const quota = 1_000
  const subjects = [subject('flushed', { monthlyQuota: { requests: quota } })]
  let admitted = 0
  let reads = 0
  const limiters = replicas(t, 2, {
    url: server.url,
    prefix,
    loadMonthUse: async () => {
      reads++
      return admitted
    },
  })
  await Promise.all(limiters.map((limiter) => limiter.warm(subjects)))
  let flushedAt = -1
  let flushTime = Number.POSITIVE_INFINITY
  let lastPass = Date.now()
  // Until well after the flush, and nothing passes any more.
  for (let i = 0; Date.now() - flushTime < 4_000 || Date.now() - lastPass < 500; i++) {
    if (limiters[Math.random() < 0.5 ? 0 : 1]!.admit(subjects).allowed) {
      admitted++
      lastPass = Date.now()
    }
    if (flushedAt < 0 && admitted >= quota - 25) {
      flushedAt = admitted
      flushTime = Date.now()
      await admin.flushdb()
    }
    if (i % 4 === 0) await sleep(1)
  }
  t.comment(`flushed after ${flushedAt}; ${admitted} passed in all; the month read ${reads} times`)
  t.ok(reads >= 2, 'the month was read again after the flush')
  // Across the loss at most one quota lease (ceil(M/100), quota-limit.ts) per replica over.
  const bound = quota + 2 * Math.ceil(quota / 100)
  t.ok(admitted <= bound, `at most a lease per replica over (${admitted} of ${quota}, bound ${bound})`)
  // A unit spent between a lease call and the month's read counts twice: a few may be lost.
  t.ok(admitted >= quota - (2 * quota) / 100, 'at most a lease per replica short')
})

t.test('Redis down: degraded, every limit held by each replica on its own; then back', async (t) => {
  await agedRedis(admin, prefix)
  const rate = { requests: 50, perSeconds: 1 }
  const subjects = [subject('outage', { rate, monthlyQuota: { requests: 100_000 } })]
  // How they decide, not how fast Redis answers: a loaded machine can hold a lease call past the
  // 250 ms of production, and a replica whose call timed out is on its own again (degraded), each
  // at the whole rate. A killed server still fails every call at once (no offline queue).
  const spells = new DegradedSpells()
  const limiters = replicas(t, 2, { url: server.url, prefix, timings: { callTimeoutMs: 2_000 }, spells })
  await Promise.all(limiters.map((limiter) => limiter.warm(subjects)))
  const before = await offer(4 * rate.requests, 1_000, (i) => limiters[i % 2]!, subjects)
  t.notOk(limiters[0]!.degraded, 'shared before')

  await server.kill()
  const perReplica: number[][] = [[], []]
  const start = preciseNow()
  for (let i = 0; preciseNow() - start < 2_000; i++) {
    const which = i % 2
    if (limiters[which]!.admit(subjects).allowed) perReplica[which]!.push(preciseNow())
    await sleep(2)
  }
  t.ok(
    limiters.every((limiter) => limiter.degraded),
    'both replicas degraded',
  )
  for (const [i, passed] of perReplica.entries()) {
    const worst = worstWindow(passed, rate)
    t.comment(
      `replica ${i} on its own: ${passed.length} passed in 2 s, worst window ${worst.count} in ${worst.seconds.toFixed(3)} s`,
    )
    t.ok(worst.excess <= rate.requests / 1000, `replica ${i} keeps the rate on its own`)
    t.ok(passed.length >= 0.9 * rate.requests * 2, `replica ${i} still admits (${passed.length})`)
  }

  await server.start()
  const back = await eventually(6_000, async () => {
    for (const limiter of limiters) limiter.admit(subjects)
    return limiters.every((limiter) => !limiter.degraded)
  })
  t.not(back, null, `shared again ${back} ms after Redis came back`)
  const spellsBefore = spells.count
  const after = await offer(4 * rate.requests, 1_500, (i) => limiters[i % 2]!, subjects)
  t.equal(spells.count, spellsBefore, 'every lease call answered once back: no replica on its own')
  const worst = worstWindow(after.admitted, rate, after.admittedFrom)
  t.comment(
    `before ${before.admitted.length} of ${before.offered}; after ${after.admitted.length} of ${after.offered}, worst window ${worst.count} in ${worst.seconds.toFixed(3)} s`,
  )
  t.ok(worst.excess <= rate.requests / 1000, 'one shared rate again')
  t.ok(after.admitted.length >= 0.95 * rate.requests * 1.5, 'and it admits what the rate allows')
})
