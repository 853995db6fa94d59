// A quota's month rebuilt after Redis forgets it, with two replicas whose usage meters write to
// Postgres about once a second (docs/internals.md, "A month rebuilt from Postgres"), on a
// redis-server of the test's own: a FLUSHDB while both serve, a replica kept away from Redis
// longer than the other, and a Redis that stalls. Never over the quota by more than a lease per
// replica, and no unspent lease left counted as used.
//
// Postgres is not part of the limiter: each replica's meter here is the gateway's in small (its
// counts written about once a second, its lag the age of the oldest count not written), and the
// month's use is what the meters wrote, as the usage table holds it.
import t, { type Test } from 'tap'
import { limitKeys } from '../../src/limits/keys.js'
import { Limiter } from '../../src/limits/limiter.js'
import type { LimitSubject } from '../../src/limits/types.js'
import { agedRedis, DegradedSpells, limiterClient } from '../helpers/limits.js'
import { startRedis } from '../helpers/own-redis.js'
import { eventually, sleep } from '../helpers/poll.js'
import { redisClient } from '../helpers/redis.js'
import { tcpRelay } from '../helpers/tcp-relay.js'

const server = await startRedis(t)
const admin = redisClient(t, { url: server.url })
const prefix = 'rebuild:'
const month = () => new Date().toISOString().slice(0, 7)

/** The usage table: what every replica's meter wrote. */
class Usage {
  written = 0
}

/** A replica's usage meter: counts in memory, written once a second (src/usage/meter.ts). */
class Meter {
  private pending = 0
  private since: number | null = null
  private readonly usage: Usage
  constructor(t: Test, usage: Usage) {
    this.usage = usage
    const timer = setInterval(() => this.flush(), 1_000)
    t.teardown(() => clearInterval(timer))
  }

  record(units: number): void {
    this.pending += units
    this.since ??= Date.now()
  }

  flush(): void {
    this.usage.written += this.pending
    this.pending = 0
    this.since = null
  }

  /** As UsageMeter.lagMs: how long the oldest count not written has waited. */
  lagMs(): number {
    return this.since === null ? 0 : Date.now() - this.since
  }
}

interface Replica {
  limiter: Limiter
  meter: Meter
}

function replica(
  t: Test,
  usage: Usage,
  options: { url?: string; callTimeoutMs?: number; spells?: DegradedSpells; index?: number } = {},
): Replica {
  const meter = new Meter(t, usage)
  const limiter = new Limiter({
    redis: limiterClient(t, options.url ?? server.url),
    keyPrefix: prefix,
    // As the gateway's (limits/plugin.ts): the meter writes before the month is read.
    loadMonthUse: async () => usage.written,
    writeUsage: async () => meter.flush(),
    unwrittenForMs: () => meter.lagMs(),
    timings: { callTimeoutMs: options.callTimeoutMs ?? 2_000 },
    warmWaitMs: 10_000,
    ...(options.spells === undefined ? {} : { metrics: options.spells.metricsOf(options.index ?? 0) }),
  })
  t.teardown(() => limiter.close())
  return { limiter, meter }
}

/** A units quota (a route meter's, charged when the answer ends) or a request quota. */
function subjectsOf(tenantId: string, quota: number, meter: string | null): LimitSubject[] {
  const monthlyQuota = { requests: quota }
  const limits =
    meter === null
      ? { rate: null, monthlyQuota }
      : { rate: null, monthlyQuota: null, meters: [{ meter, rate: null, monthlyQuota }] }
  return [{ tenantId, level: 'sub_account', limits }]
}

/** One request on `replica`, as the proxy makes it: `units` counted if it passed, else 0. */
async function request(
  { limiter, meter }: Replica,
  subjects: LimitSubject[],
  units: number,
  meterName: string | null,
): Promise<number> {
  const decision = limiter.isWarm(subjects) ? limiter.admit(subjects) : await limiter.admitWhenWarm(subjects, 10_000)
  if (!decision.allowed) return 0
  if (meterName !== null) limiter.charge(subjects, new Map([[meterName, units]]))
  meter.record(units)
  return units
}

/**
 * Requests at `perSecond`, alternating replicas, until nothing passed for a second and `done()`;
 * `each(admitted)` runs after every request. Returns the units admitted.
 */
async function serveUntilRefused(
  replicas: Replica[],
  subjects: LimitSubject[],
  perSecond: number,
  units: number,
  meterName: string | null,
  each: (admitted: number) => Promise<void> | void = () => {},
  done: () => boolean = () => true,
): Promise<number> {
  let admitted = 0
  let lastPass = Date.now()
  const start = Date.now()
  for (let i = 0; ; i++) {
    const due = start + (i * 1_000) / perSecond
    if (Date.now() < due) await sleep(due - Date.now())
    const passed = await request(replicas[i % replicas.length]!, subjects, units, meterName)
    if (passed > 0) lastPass = Date.now()
    admitted += passed
    await each(admitted)
    if (Date.now() - lastPass > 1_000 && done()) return admitted
  }
}

/** Every replica refuses the next request, for its quota (the month is spent, not miscounted). */
async function refusedForTheQuota(t: Test, replicas: Replica[], subjects: LimitSubject[]): Promise<void> {
  for (const [i, { limiter }] of replicas.entries()) {
    const decision = await limiter.admitWhenWarm(subjects, 10_000)
    t.notOk(decision.allowed, `replica ${i} refuses once the quota is spent`)
    t.match(decision.violated[0] ?? '', /monthly_quota$/, `replica ${i} refuses for the quota`)
  }
}

/**
 * A quota of 1,200 on two replicas, 300 units a second; Redis forgets the month once 500 are
 * admitted (`forget`), while both serve and each meter has up to a second not written. At most a
 * lease per replica over.
 */
async function forgetWhileServing(
  t: Test,
  tenant: string,
  units: number,
  meterName: string | null,
  forget: (replicas: Replica[]) => Promise<void> = () => admin.flushdb().then(() => {}),
): Promise<void> {
  await agedRedis(admin, prefix)
  const quota = 1_200
  const subjects = subjectsOf(tenant, quota, meterName)
  const usage = new Usage()
  const replicas = [replica(t, usage), replica(t, usage)]
  await Promise.all(replicas.map(({ limiter }) => limiter.warm(subjects)))
  let forgotAt: number | null = null
  let forgetting: Promise<void> | null = null
  const admitted = await serveUntilRefused(
    replicas,
    subjects,
    300 / units,
    units,
    meterName,
    async (admitted) => {
      if (forgotAt === null && admitted >= 500) {
        forgotAt = admitted
        forgetting = forget(replicas)
      }
    },
    () => forgotAt !== null,
  )
  await forgetting
  // A lease is ceil(M/100) units (quota-limit.ts); a units quota lets a request pass while one
  // unit is left, and charges its units after: the answer's units beyond that one are owed too.
  const bound = quota + replicas.length * (Math.ceil(quota / 100) + units - 1)
  t.comment(`forgotten after ${forgotAt}; ${admitted} units admitted of ${quota}, bound ${bound}`)
  t.ok(admitted <= bound, `at most a lease per replica over (${admitted} ≤ ${bound})`)
  // Nor refused early for what was counted twice (the outage's units, written before the read and
  // reported again): a unit spent between a replica's last answer and the read may be.
  const floor = quota - replicas.length * Math.ceil(quota / 100)
  t.ok(admitted >= floor, `at most a lease per replica short (${admitted} ≥ ${floor})`)
  await refusedForTheQuota(t, replicas, subjects)
}

t.test('a units quota of 1,200, FLUSHDB while two replicas serve: within the bound', async (t) => {
  await forgetWhileServing(t, 'units-flushed', 3, 'tokens')
})

t.test('a request quota of 1,200, FLUSHDB while two replicas serve: within the bound', async (t) => {
  await forgetWhileServing(t, 'requests-flushed', 1, null)
})

t.test('a request quota of 1,200, Redis restarted empty while two replicas serve: within the bound', async (t) => {
  // Killed, and started again once both replicas found it gone (each on its own meanwhile, with
  // far less traffic than the month has left: degraded mode's own allowance plays no part).
  await forgetWhileServing(t, 'requests-restarted', 1, null, async (replicas) => {
    await server.kill()
    const alone = await eventually(10_000, async () => replicas.every(({ limiter }) => limiter.degraded))
    t.not(alone, null, 'both replicas on their own')
    await server.start()
    const back = await eventually(15_000, async () => replicas.every(({ limiter }) => !limiter.degraded))
    t.not(back, null, 'both back on the rebuilt month')
  })
})

t.test('one replica kept away from Redis longer than the other across a FLUSHDB', async (t) => {
  // The sequence that undercounted without bound (docs/decisions): the replica away admits on its
  // own, its meter writes that to Postgres after the other rebuilt the month from it.
  await agedRedis(admin, prefix)
  const quota = 1_000
  const subjects = subjectsOf('away', quota, null)
  const usage = new Usage()
  const relay = await tcpRelay(t, server.port)
  const near = replica(t, usage)
  const away = replica(t, usage, { url: `redis://127.0.0.1:${relay.port}` })
  const both = [near, away]
  await Promise.all(both.map(({ limiter }) => limiter.warm(subjects)))
  let admitted = 0
  for (let i = 0; i < 300; i++) admitted += await request(both[i % 2]!, subjects, 1, null)

  relay.cut()
  const gone = await eventually(10_000, async () => {
    admitted += await request(away, subjects, 1, null)
    return away.limiter.degraded
  })
  t.not(gone, null, 'the replica away is on its own')
  await admin.flushdb()
  // 200 on each: the one near rebuilds the month from Postgres, the one away admits on its own,
  // and its meter writes those to Postgres after the month was read.
  for (let i = 0; i < 400; i++) {
    admitted += await request(both[i % 2]!, subjects, 1, null)
    if (i % 20 === 0) await sleep(50)
  }
  t.notOk(near.limiter.degraded, 'the one near is on the rebuilt month')
  t.ok(away.limiter.degraded, 'the one away is still on its own')

  relay.heal()
  const back = await eventually(15_000, async () => {
    admitted += await request(away, subjects, 1, null)
    return !away.limiter.degraded
  })
  t.not(back, null, 'the one away is back on Redis')
  admitted += await serveUntilRefused(both, subjects, 300, 1, null)
  const bound = quota + both.length * Math.ceil(quota / 100)
  t.comment(`${admitted} admitted of ${quota}, bound ${bound}`)
  t.ok(admitted <= bound, `at most a lease per replica over (${admitted} ≤ ${bound})`)
  await refusedForTheQuota(t, both, subjects)
})

t.test('a Redis stalled (SIGSTOP) past the calls deadline leaves no unspent lease counted as used', async (t) => {
  await agedRedis(admin, prefix)
  const subjects = subjectsOf('stalled', 100_000, null)
  const key = limitKeys.quota(prefix, 'sub_account:stalled', month())
  const usage = new Usage()
  const spells = new DegradedSpells()
  // Production's deadline: a call unanswered after 250 ms is a failure, and Redis may run it later.
  const both = [0, 1].map((index) => replica(t, usage, { callTimeoutMs: 250, spells, index }))
  await Promise.all(both.map(({ limiter }) => limiter.warm(subjects)))
  let served = 0
  // A burst: each replica's lease grows to a tenth of a second of it.
  for (let i = 0; i < 600; i++) {
    served += await request(both[i % 2]!, subjects, 1, null)
    if (i % 10 === 0) await sleep(10)
  }
  server.pause()
  // A trickle while Redis does not answer: the next call (a renewal) fails, and each replica goes
  // on alone, with most of its lease unspent.
  let turn = 0
  const alone = await eventually(
    10_000,
    async () => {
      served += await request(both[turn++ % 2]!, subjects, 1, null)
      return both.every(({ limiter }) => limiter.degraded)
    },
    100,
  )
  server.resume()
  t.not(alone, null, 'both replicas went on alone')
  const back = await eventually(
    10_000,
    async () => {
      for (const replica of both) served += await request(replica, subjects, 1, null)
      return both.every(({ limiter }) => !limiter.degraded)
    },
    100,
  )
  t.not(back, null, 'both back on their leases')
  // Closing gives back what each holds: what is left counted is what was served.
  await Promise.all(both.map(({ limiter }) => limiter.close()))
  const used = Number(await admin.hget(key, 'used'))
  t.comment(`${served} served; Redis counts ${used} once the leases are back`)
  t.equal(used, served, 'the month counts what was served, no lease left unspent')
})
