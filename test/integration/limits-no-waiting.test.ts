// No waiting (docs/api.md#limits-and-quotas): in steady traffic no request waits for Redis to
// decide a limit. Three gateway replicas of one deployment over real sockets and the tests' Redis:
// a tenant past its rate, and one past its monthly quota, keep sending; once every replica has
// found the limit reached, tgw_limit_cold_waits_total stays where it was, while the rate still
// holds its bound and admits what it refills (docs/internals.md, limits). Sentinel and a
// cluster: limits-no-waiting-topologies.test.ts.
import t from 'tap'
import { coldWaits, deploy, offer, tenant, twiceTheRate, untilEveryReplicaRefused } from '../helpers/limits-steady.js'
import { requireRedis } from '../helpers/redis.js'
import { startUpstream } from '../helpers/upstream.js'

await requireRedis()
const upstream = await startUpstream(t)
const forwarded = (path: string) => upstream.received.filter((r) => r.url.startsWith(path)).length
const shared = await deploy(t, 'shared', upstream.url)

t.test('a rate offered twice over, 3 replicas: once warm, no request waits; never over, ≥ 95 %', (t) =>
  twiceTheRate(t, shared, 'twice'),
)

t.test('a monthly quota spent, 3 replicas: its refusals come from memory, none waits', async (t) => {
  const quota = 40
  const headers = await tenant(shared, 'spent', { monthly_quota: { requests: quota } })
  const path = '/v1/things/spent'
  await untilEveryReplicaRefused(shared, headers, path, 100, 500)
  const warm = await coldWaits(shared)
  const steady = await offer(shared, headers, path, 100, 2_000)
  const after = await coldWaits(shared)
  const counts: Record<string, number> = {}
  for (const a of steady.answers) {
    const key = `${a.status} ${a.code ?? ''}`.trim()
    counts[key] = (counts[key] ?? 0) + 1
  }
  t.same(counts, { '429 quota_exceeded': steady.answers.length }, 'every one refused quota_exceeded')
  t.same(
    after.map((n, i) => n - warm[i]!),
    [0, 0, 0],
    `none waited for Redis (cold waits at warm ${warm.join('/')}, after ${after.join('/')})`,
  )
  t.equal(forwarded(path), quota, `the upstream got exactly M = ${quota}`)
})
