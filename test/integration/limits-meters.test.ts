// Limits in units (docs/api.md, Limits in units), over real sockets to a real upstream that reports
// tokens, with the limits leased from the tests' Redis and embedded (no Redis): a request passes
// while a meter's balance is above zero and its reported units are charged when its answer ends,
// so the balance may go below zero by the units of the answers in flight, and then refuses until
// refilled; the refusal names the meter's policy; the account's meter limits come from the
// operator's CLI; bad meter limits are a 400 that names the field and change nothing.
import t from 'tap'
import { monthOf } from '../../src/limits/month.js'
import { monthUse } from '../../src/limits/store.js'
import { cli } from '../helpers/cli.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { metricValue, startGateway, type TestGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { UNHURRIED_LIMITS } from '../helpers/limits.js'
import { until } from '../helpers/poll.js'
import type { JsonBody } from '../helpers/json.js'
import { checkProblem } from '../helpers/problems.js'
import { REDIS_URL, redisPrefix } from '../helpers/redis.js'
import { holdingUpstream, reportsTokens, startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t, reportsTokens)
// Streamed, the units known at the end: a trailer.
const streaming = await startUpstream(t, (request, response) => {
  const tokens = new URLSearchParams(request.url!.split('?')[1] ?? '').get('tokens') ?? '0'
  response.writeHead(200, { 'content-type': 'text/event-stream', trailer: 'X-Tokens-Used' })
  response.write('data: one\n\n')
  response.addTrailers({ 'X-Tokens-Used': tokens })
  response.end('data: two\n\n')
})
const routes = [
  { prefix: '/llm', upstream: upstream.url, meters: [{ name: 'tokens', header: 'x-tokens-used' }] },
  { prefix: '/sse', upstream: streaming.url, meters: [{ name: 'tokens', header: 'x-tokens-used' }] },
]

/** Waits until the gateway accounted `count` proxied requests: their units are charged by then. */
async function accounted(gw: TestGateway, count: number): Promise<void> {
  const done = await until(10_000, async () => (await metricValue(gw.app, 'tgw_proxied_requests_total')) >= count)
  if (!done) throw new Error(`the gateway did not account ${count} proxied requests`)
}

for (const redis of [undefined, false] as const) {
  const mode = redis === false ? 'embedded (no Redis)' : 'leased from Redis'
  t.test(mode, async (t) => {
    const keyPrefix = redis === false ? undefined : redisPrefix(t)
    // Holds /held/… until released: answers certain to be in flight together.
    const holding = await holdingUpstream(t, { holdPrefix: '/held', delayMs: [0, 0], reply: reportsTokens })
    const held = { prefix: '/held', upstream: holding.url, meters: [{ name: 'tokens', header: 'x-tokens-used' }] }
    const gw = await startGateway(t, {
      // What the limits let through, not how fast Redis answers a busy machine.
      ...UNHURRIED_LIMITS,
      usageFlushIntervalMs: 3_600_000,
      ...(redis === false ? { redis: false } : { redisKeyPrefix: keyPrefix }),
      gatewayConfig: { routes: [...routes, held] },
    })
    const parent = await gw.createParent({ name: 'P' })
    let sent = 0
    /** One request that reports `tokens`, acting as `acting`, accounted before the next. */
    const send = async (acting: string, tokens: number) => {
      const res = await callAs(gw.url, parent.apiKey, { path: `/llm/x?tokens=${tokens}`, acting })
      await accounted(gw, ++sent)
      return res
    }
    const subAccount = async (name: string, limits: unknown) => {
      const res = await callAs(gw.url, parent.apiKey, {
        method: 'POST',
        path: '/v1/sub-accounts',
        acting: 'self',
        json: { name, limits },
      })
      if (res.status !== 201) throw new Error(`create ${name}: ${res.status} ${res.body}`)
      return res.json() as { id: string; limits: unknown }
    }

    t.test('a monthly quota of 100 tokens: passes while above zero, charged after, then refused', async (t) => {
      const limits = {
        rate: null,
        monthly_quota: null,
        meters: { tokens: { rate: null, monthly_quota: { units: 100 } } },
      }
      const sub = await subAccount('quota', limits)
      t.same(sub.limits, limits, 'the meter limits are shown as set')
      for (const used of [30, 60, 90]) {
        const res = await send(sub.id, 30)
        t.equal(res.status, 200, `${used} of 100 tokens used${res.status === 200 ? '' : `: ${res.body.slice(0, 300)}`}`)
        t.match(res.headers['ratelimit-policy'], /^"sub_account\.meters\.tokens\.monthly_quota";q=100;w=\d+$/)
      }
      t.equal((await send(sub.id, 30)).status, 200, 'at 90 of 100 the balance is above zero: it passes')
      const refused = await send(sub.id, 1)
      checkProblem(t, refused, 429, 'quota_exceeded', 'at 120 of 100: refused until the month ends')
      t.same(refused.json().violated_policies, ['sub_account.meters.tokens.monthly_quota'])
      t.match(refused.headers.ratelimit, /^"sub_account\.meters\.tokens\.monthly_quota";r=0;t=\d+$/)

      await gw.app.usageMeter.flush()
      const month = monthOf(Date.now())
      t.equal(await monthUse(gw.sql, { tenantId: sub.id, level: 'sub_account' }, month, 'tokens'), 120, 'counted')
      const usage = await callAs(gw.url, parent.apiKey, { path: `/v1/sub-accounts/usage?sub_account_id=${sub.id}` })
      t.same(usage.json().data[0].units, { requests: 4, tokens: 120 }, 'the usage report: 4 requests, 120 tokens')
    })

    t.test('answers in flight when the balance runs out: the overdraft is at most their units', async (t) => {
      const sub = await subAccount('burst', { meters: { tokens: { monthly_quota: { units: 100 } } } })
      // Five answers in flight together, each to report 40: all five were admitted while the
      // balance was above zero, and pass; 200 of 100 is the overdraft, 40 short of their units.
      const burst = Array.from({ length: 5 }, () =>
        callAs(gw.url, parent.apiKey, { path: '/held/x?tokens=40', acting: sub.id }),
      )
      const inFlight = await until(10_000, async () => holding.held() === 5)
      t.ok(inFlight, 'all five admitted and at the upstream')
      holding.release()
      const answers = await Promise.all(burst)
      sent += 5
      await accounted(gw, sent)
      t.same(
        answers.map((res) => res.status),
        [200, 200, 200, 200, 200],
        'every answer in flight passes',
      )
      await gw.app.usageMeter.flush()
      const used = await monthUse(gw.sql, { tenantId: sub.id, level: 'sub_account' }, monthOf(Date.now()), 'tokens')
      t.equal(used, 200, 'all of their units charged and counted')
      t.ok(used - 100 <= 5 * 40, `overdrawn by ${used - 100}: within the 200 units in flight when it ran out`)
      const refused = await send(sub.id, 1)
      checkProblem(t, refused, 429, 'quota_exceeded', 'nothing more passes once they are charged')
    })

    t.test('a streamed answer is charged what its trailer reports', async (t) => {
      const sub = await subAccount('streamed', { meters: { tokens: { monthly_quota: { units: 100 } } } })
      const stream = async () => {
        const res = await callAs(gw.url, parent.apiKey, { path: '/sse/x?tokens=60', acting: sub.id })
        await accounted(gw, ++sent)
        return res
      }
      t.equal((await stream()).status, 200)
      t.equal((await stream()).status, 200, 'at 60 of 100 the balance is above zero')
      checkProblem(t, await stream(), 429, 'quota_exceeded', 'at 120 of 100: refused')
    })

    t.test('a rate of 50 tokens a minute: refused once spent, named in RateLimit', async (t) => {
      const sub = await subAccount('rated', { meters: { tokens: { rate: { units: 50, per_seconds: 60 } } } })
      t.equal((await send(sub.id, 30)).status, 200)
      const second = await send(sub.id, 30)
      t.equal(second.status, 200, 'at 30 of 50 the balance is above zero')
      const refused = await send(sub.id, 1)
      checkProblem(t, refused, 429, 'rate_limited', 'at 60 of 50: refused')
      t.same(refused.json().violated_policies, ['sub_account.meters.tokens.rate'])
      const wait = Number(refused.headers['retry-after'])
      t.ok(wait >= 1 && wait <= 60, `Retry-After ${wait} s: until the debt is refilled`)
    })

    t.test('limits in requests and in units together; a report of 0 costs no tokens', async (t) => {
      const sub = await subAccount('both', {
        rate: { requests: 1000, per_seconds: 1 },
        meters: { tokens: { monthly_quota: { units: 10 } } },
      })
      const res = await send(sub.id, 0)
      t.equal(res.status, 200)
      t.match(
        res.headers['ratelimit-policy'],
        /^"sub_account\.rate";q=1000;w=1, "sub_account\.meters\.tokens\.monthly_quota";q=10;w=\d+$/,
      )
      t.equal((await send(sub.id, 9)).status, 200, '0 then 9 of 10')
      t.equal((await send(sub.id, 1)).status, 200, 'one left: it passes')
      const refused = await send(sub.id, 0)
      checkProblem(t, refused, 429, 'quota_exceeded', 'ten tokens used')
      t.same(refused.json().violated_policies, ['sub_account.meters.tokens.monthly_quota'], 'only the meter refuses')
    })

    t.test('a shadow quota in units: charged as its answers end, counted, never refusing', async (t) => {
      const sub = await subAccount('shadowed', { shadow: { meters: { tokens: { monthly_quota: { units: 10 } } } } })
      const policy = 'sub_account.shadow.meters.monthly_quota'
      const before = await metricValue(gw.app, 'tgw_limit_shadow_refusals_total', { policy })
      t.equal((await send(sub.id, 30)).status, 200)
      const second = await send(sub.id, 30)
      t.equal(second.status, 200, 'never refused')
      t.equal(second.headers['ratelimit-policy'], undefined, 'no RateLimit field of the shadow')
      t.equal(
        (await metricValue(gw.app, 'tgw_limit_shadow_refusals_total', { policy })) - before,
        1,
        'the second would have been refused: the first answer was charged 30 of 10',
      )
    })

    t.test('usage.threshold_reached for a quota in units: the meter named, its units counted', async (t) => {
      const quota = { units: 100, alert_thresholds: [50] }
      const sub = await subAccount('alerted', { meters: { tokens: { monthly_quota: quota } } })
      const alerts = async () => {
        const res = await callAs(gw.url, parent.apiKey, {
          path: '/v1/sub-accounts/events?type=usage.*',
          acting: 'self',
        })
        return (res.json().data as { target: { id: string } }[]).filter((event) => event.target.id === sub.id)
      }
      t.equal((await send(sub.id, 40)).status, 200)
      await gw.app.usageMeter.flush()
      await gw.app.alerts.check()
      t.same(await alerts(), [], '40 of 100: no alert')
      t.equal((await send(sub.id, 20)).status, 200)
      await gw.app.usageMeter.flush()
      // The limiter's count is the hint: the answer to the lease call that carried the charge.
      const alerted = await until(10_000, async () => {
        await gw.app.alerts.check()
        return (await alerts()).length > 0
      })
      t.ok(alerted, 'an alert at 60 of 100')
      const [event, ...more] = (await alerts()) as JsonBody[]
      t.same(more, [], 'one')
      t.equal(event.type, 'usage.threshold_reached')
      t.same(event.target, { type: 'sub_account', id: sub.id })
      t.match(event.data.object, {
        policy: 'sub_account.meters.tokens.monthly_quota',
        meter: 'tokens',
        tenant_id: sub.id,
        threshold_percent: 50,
        monthly_quota: quota,
        used: 60,
      })
    })

    t.test("the account's meter limits, from the operator's CLI, bound its sub-accounts together", async (t) => {
      if (redis === false) return t.pass('the CLI tells replicas through Redis; the account level is tested with it')
      const { ok, fails } = cli({
        DATABASE_URL: gw.database.url,
        ENCRYPTION_KEY: TEST_ENCRYPTION_KEY,
        REDIS_URL,
        REDIS_KEY_PREFIX: keyPrefix!,
      })
      const out = await ok(t, [
        'accounts',
        'limits',
        '--account',
        parent.id,
        '--meter',
        'tokens',
        '--monthly-quota',
        '500',
      ])
      t.same(out.account.limits, {
        rate: null,
        monthly_quota: null,
        meters: { tokens: { rate: null, monthly_quota: { units: 500 } } },
      })
      const rated = await ok(t, ['accounts', 'limits', '--account', parent.id, '--rate', '1000/1s'])
      t.same(
        rated.account.limits.meters,
        { tokens: { rate: null, monthly_quota: { units: 500 } } },
        'a change of the request limits keeps the meters',
      )
      await fails(t, ['accounts', 'limits', '--account', parent.id, '--meter', 'requests', '--rate', '1/1s'], /--meter/)
      await fails(t, ['accounts', 'limits', '--account', parent.id, '--meter', 'Tokens', '--rate', '1/1s'], /--meter/)
      await fails(t, ['accounts', 'limits', '--account', parent.id, '--meter', 'tokens', '--rate', '0/1s'], /--rate/)

      const a = await subAccount('a', null)
      const b = await subAccount('b', null)
      // What the other tests used counts toward the account too: 350 of its tokens so far... at
      // most; spend the rest from two sub-accounts until the account refuses.
      let refused = null
      for (let i = 0; i < 20 && refused === null; i++) {
        const res = await send(i % 2 === 0 ? a.id : b.id, 100)
        if (res.status === 429) refused = res
      }
      t.ok(refused !== null, 'the account refused within 20 requests of 100 tokens')
      t.same(refused!.json().violated_policies, ['account.meters.tokens.monthly_quota'])
      const shown = await callAs(gw.url, parent.apiKey, { path: '/v1/sub-accounts/limits', acting: 'self' })
      t.same(shown.json().account.meters, { tokens: { rate: null, monthly_quota: { units: 500 } } })

      const cleared = await ok(t, ['accounts', 'limits', '--account', parent.id, '--meter', 'tokens', '--clear'])
      t.same(cleared.account.limits, { rate: { requests: 1000, per_seconds: 1 }, monthly_quota: null }, 'cleared')
      for (let i = 0; i < 16; i++)
        await ok(t, ['accounts', 'limits', '--account', parent.id, '--meter', `m${i}`, '--rate', '1000/1s'])
      await fails(
        t,
        ['accounts', 'limits', '--account', parent.id, '--meter', 'm16', '--rate', '1000/1s'],
        /at most 16 meters/,
      )
    })
  })
}

t.test('bad meter limits: 400 validation_failed naming the field, nothing written', async (t) => {
  const gw = await startGateway(t, { redis: false, gatewayConfig: { routes } })
  const parent = await gw.createParent({ name: 'P' })
  const create = (limits: unknown) =>
    callAs(gw.url, parent.apiKey, {
      method: 'POST',
      path: '/v1/sub-accounts',
      acting: 'self',
      json: { name: 'x', limits },
    })
  const cases: [string, unknown, RegExp][] = [
    [
      'requests is the cost meter',
      { meters: { requests: { rate: { units: 1, per_seconds: 1 } } } },
      /\/body\/limits\/meters\/requests/,
    ],
    ['a name with capitals', { meters: { Tokens: { rate: null } } }, /\/body\/limits\/meters\/Tokens/],
    [
      'units of 0',
      { meters: { tokens: { monthly_quota: { units: 0 } } } },
      /\/body\/limits\/meters\/tokens\/monthly_quota\/units/,
    ],
    ['units over 10^12', { meters: { tokens: { monthly_quota: { units: 1e12 + 1 } } } }, /units/],
    ['a window over an hour', { meters: { tokens: { rate: { units: 5, per_seconds: 3601 } } } }, /per_seconds/],
    ['requests in place of units', { meters: { tokens: { rate: { requests: 5, per_seconds: 1 } } } }, /tokens\/rate/],
    ['an unknown member', { meters: { tokens: { burst: 5 } } }, /tokens/],
    [
      'seventeen meters',
      { meters: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`m${i}`, { rate: null }])) },
      /\/body\/limits\/meters/,
    ],
  ]
  for (const [what, limits, field] of cases) {
    const res = await create(limits)
    checkProblem(t, res, 400, 'validation_failed', what)
    t.match(JSON.stringify(res.json().errors), field, `${what}: names the field`)
  }
  const listed = await callAs(gw.url, parent.apiKey, { path: '/v1/sub-accounts', acting: 'self' })
  t.same(listed.json().data, [], 'no sub-account was created')

  const sub = await create({ meters: { tokens: { rate: { units: 5, per_seconds: 1 } } } })
  t.equal(sub.status, 201)
  const id = sub.json().id
  const patched = await callAs(gw.url, parent.apiKey, {
    method: 'PATCH',
    path: `/v1/sub-accounts/${id}`,
    acting: 'self',
    json: { limits: { meters: { requests: { rate: null } } } },
  })
  checkProblem(t, patched, 400, 'validation_failed', 'a PATCH is checked the same')
  const kept = await callAs(gw.url, parent.apiKey, { path: `/v1/sub-accounts/${id}`, acting: 'self' })
  t.same(
    kept.json().limits.meters,
    { tokens: { rate: { units: 5, per_seconds: 1 }, monthly_quota: null } },
    'unchanged',
  )
  const none = await callAs(gw.url, parent.apiKey, {
    method: 'PATCH',
    path: `/v1/sub-accounts/${id}`,
    acting: 'self',
    json: { limits: { meters: { tokens: { rate: null } } } },
  })
  t.same(none.json().limits, { rate: null, monthly_quota: null }, 'a meter without a limit is left out')
})
