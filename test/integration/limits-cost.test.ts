// A route's cost weighs its requests in every rate and quota (docs/api.md, Limits and quotas;
// Units), over real sockets to a real upstream, with the limits leased from the tests' Redis and
// embedded (no Redis): a request of cost 5 takes 5 units and passes only if 5 are left, a cheaper
// one may pass where it cannot, one that costs more than the rate never passes, and what a quota
// counted is what the usage report shows as request units.
import t from 'tap'
import { monthOf } from '../../src/limits/month.js'
import { monthUse } from '../../src/limits/store.js'
import { startGateway } from '../helpers/gateway.js'
import { UNHURRIED_LIMITS } from '../helpers/limits.js'
import { callAs } from '../helpers/http.js'
import { sleep } from '../helpers/poll.js'
import { checkProblem } from '../helpers/problems.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t)

/** Lets a limit's lease be renewed in the background between requests (limits-proxy.test.ts). */
const renewal = () => sleep(150)

for (const redis of [undefined, false] as const) {
  const mode = redis === false ? 'embedded (no Redis)' : 'leased from Redis'
  t.test(mode, async (t) => {
    const gw = await startGateway(t, {
      // What the limits let through, not how fast Redis answers a busy machine.
      ...UNHURRIED_LIMITS,
      usageFlushIntervalMs: 3_600_000,
      ...(redis === false ? { redis: false } : {}),
      gatewayConfig: {
        routes: [
          { prefix: '/heavy', upstream: upstream.url, cost: 5 },
          { prefix: '/light', upstream: upstream.url },
        ],
      },
    })
    const parent = await gw.createParent({ name: 'P' })
    const subAccount = async (name: string, limits: unknown) => {
      const res = await callAs(gw.url, parent.apiKey, {
        method: 'POST',
        path: '/v1/sub-accounts',
        acting: 'self',
        json: { name, limits },
      })
      if (res.status !== 201) throw new Error(`create ${name}: ${res.status} ${res.body}`)
      return res.json().id as string
    }
    const send = async (path: string, acting: string) => {
      const res = await callAs(gw.url, parent.apiKey, { path, acting })
      await renewal()
      return res
    }

    t.test('a rate of 12: two requests of cost 5, then only requests of cost 1, two of them', async (t) => {
      const sub = await subAccount('rated', { rate: { requests: 12, per_seconds: 3600 } })
      const first = await send('/heavy/1', sub)
      t.equal(first.status, 200)
      t.match(first.headers.ratelimit, /"sub_account\.rate";r=7;/, '5 taken of 12')
      t.equal((await send('/heavy/2', sub)).status, 200)
      const refused = await send('/heavy/3', sub)
      checkProblem(t, refused, 429, 'rate_limited', 'a third of cost 5: 2 are left')
      t.same(refused.json().violated_policies, ['sub_account.rate'])
      t.equal((await send('/light/1', sub)).status, 200, 'one of cost 1 still passes')
      t.equal((await send('/light/2', sub)).status, 200, 'and another')
      checkProblem(t, await send('/light/3', sub), 429, 'rate_limited', 'then none is left')
    })

    t.test('a request that costs more than the rate never passes; Retry-After is the window', async (t) => {
      const sub = await subAccount('narrow', { rate: { requests: 3, per_seconds: 60 } })
      const refused = await send('/heavy/x', sub)
      checkProblem(t, refused, 429, 'rate_limited', 'cost 5 over a bucket of 3')
      t.equal(refused.headers['retry-after'], '60')
      t.equal((await send('/light/x', sub)).status, 200, 'cost 1 passes')
    })

    t.test('a monthly quota of 12 counts request units; the usage report shows them', async (t) => {
      const sub = await subAccount('quota', { monthly_quota: { requests: 12 } })
      t.equal((await send('/heavy/1', sub)).status, 200)
      t.equal((await send('/heavy/2', sub)).status, 200)
      const refused = await send('/heavy/3', sub)
      checkProblem(t, refused, 429, 'quota_exceeded', 'a third of cost 5 would pass 12')
      t.same(refused.json().violated_policies, ['sub_account.monthly_quota'])
      t.equal((await send('/light/1', sub)).status, 200)
      t.equal((await send('/light/2', sub)).status, 200)
      checkProblem(t, await send('/light/3', sub), 429, 'quota_exceeded', 'then none is left')

      await gw.app.usageMeter.flush()
      t.equal(await monthUse(gw.sql, { tenantId: sub, level: 'sub_account' }, monthOf(Date.now())), 12)
      const usage = await callAs(gw.url, parent.apiKey, { path: `/v1/sub-accounts/usage?sub_account_id=${sub}` })
      const [entry] = usage.json().data
      t.equal(entry.requests, 6, 'six requests answered: four passed, two refused')
      t.same(entry.units, { requests: 12 }, 'twelve request units')
    })
  })
}
