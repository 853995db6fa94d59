// A monthly quota over two gateway replicas, with Postgres, an upstream on real sockets and a
// redis-server of the test's own, flushed (FLUSHDB) while both serve: the month rebuilt from
// Postgres counts what the replicas' usage meters had not written yet (docs/internals.md, "A month
// rebuilt from Postgres"). The meters write every 3 s here, not every second: the same lag at a
// third of the traffic the machine can give a test.
import t from 'tap'
import { actingHeaders, agents, subAccountVia } from '../helpers/gateway-load.js'
import { startReplicas } from '../helpers/gateway.js'
import { getOverAgent } from '../helpers/http.js'
import { agedRedis, UNHURRIED_LIMITS } from '../helpers/limits.js'
import { startRedis } from '../helpers/own-redis.js'
import { sleep } from '../helpers/poll.js'
import { redisClient } from '../helpers/redis.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t)
const server = await startRedis(t)
const admin = redisClient(t, { url: server.url })

t.test('a quota of 1,200 over two replicas, FLUSHDB after 500: at most a lease per replica over', async (t) => {
  const prefix = 'gw-rebuild:'
  await agedRedis(admin, prefix)
  const replicas = await startReplicas(t, 2, {
    redis: server.url,
    redisKeyPrefix: prefix,
    gatewayConfig: { routes: [{ prefix: '/v1/things', upstream: upstream.url }] },
    // A lease call held past 250 ms by a loaded machine would send a replica on its own, where
    // each admits from its own count: this test is about the rebuild, not that mode.
    ...UNHURRIED_LIMITS,
    usageFlushIntervalMs: 3_000,
  })
  const [a] = replicas
  const pool = agents(t, 2)
  const quota = 1_200
  const parent = await a!.createParent({ scopes: ['sub_accounts:read', 'sub_accounts:write', 'things:read'] })
  const sub = await subAccountVia(a!.url, parent.apiKey, 'rebuilt', { monthly_quota: { requests: quota } })
  const headers = actingHeaders(parent.apiKey, sub)
  const path = '/v1/things/rebuilt'
  const forwarded = () => upstream.received.filter((r) => r.url.startsWith(path)).length

  let flushedAt: number | null = null
  let lastPass = Date.now()
  const statuses: Record<string, number> = {}
  // 4 clients, each sending its next request 5 ms after its last answer, alternating replicas,
  // until a second after the flush nothing passed for a second.
  await Promise.all(
    Array.from({ length: 4 }, async (_, worker) => {
      for (let i = worker; ; i++) {
        if (flushedAt !== null && Date.now() - lastPass > 1_000) return
        const res = await getOverAgent(replicas[i % 2]!.url, pool[i % 2]!, path, headers)
        const code = res.status === 200 ? '200' : `${res.status} ${JSON.parse(res.body.toString('utf8')).code}`
        statuses[code] = (statuses[code] ?? 0) + 1
        if (res.status === 200) lastPass = Date.now()
        if (flushedAt === null && forwarded() >= 500) {
          flushedAt = forwarded()
          await admin.flushdb()
        }
        await sleep(5)
      }
    }),
  )
  const bound = quota + replicas.length * Math.ceil(quota / 100)
  t.comment(`flushed after ${flushedAt}; the upstream got ${forwarded()} of ${quota}: ${JSON.stringify(statuses)}`)
  t.ok(forwarded() <= bound, `at most a lease per replica over (${forwarded()} ≤ ${bound})`)
  for (const [i, replica] of replicas.entries()) {
    const res = await getOverAgent(replica.url, pool[i]!, path, headers)
    t.equal(res.status, 429, `replica ${i} refuses once the month is spent`)
    t.equal(JSON.parse(res.body.toString('utf8')).code, 'quota_exceeded', `replica ${i}: for the quota`)
  }
})
