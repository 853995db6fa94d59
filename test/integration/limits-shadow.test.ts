// Shadow limits (docs/api.md, Shadow limits) over real sockets to a real upstream, leased from the
// tests' Redis: set by the parent (`limits.shadow`) and by the operator's CLI (`--shadow`), counted
// beside an enforced limit of the same kind without refusing, named in a metric and never in the
// RateLimit fields; bad ones are a 400 naming the field, and change nothing.
import t from 'tap'
import { cli } from '../helpers/cli.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import type { JsonBody } from '../helpers/json.js'
import { until } from '../helpers/poll.js'
import { checkProblem } from '../helpers/problems.js'
import { REDIS_URL, redisPrefix } from '../helpers/redis.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t)
const keyPrefix = redisPrefix(t)
const gw = await startGateway(t, {
  redisKeyPrefix: keyPrefix,
  // Alerts only when the test checks: a check of its own, between two of a test's refusals on a
  // busy machine, would report the first alone.
  alerts: { checkIntervalMs: 3_600_000 },
  gatewayConfig: { routes: [{ prefix: '/api', upstream: upstream.url }] },
})
const parent = await gw.createParent({ name: 'P' })
const shadowRefusals = (policy: string) => metricValue(gw.app, 'tgw_limit_shadow_refusals_total', { policy })
let sent = 0
const send = async (acting: string) => {
  const res = await callAs(gw.url, parent.apiKey, { path: '/api/x', acting })
  sent++
  const accounted = await until(10_000, async () => (await metricValue(gw.app, 'tgw_proxied_requests_total')) >= sent)
  if (!accounted) throw new Error('not accounted')
  return res
}

t.test('a shadow rate beside an enforced one: counted and named, never refusing', async (t) => {
  const limits = {
    rate: { requests: 5, per_seconds: 3600 },
    monthly_quota: null,
    shadow: { rate: { requests: 2, per_seconds: 3600 }, monthly_quota: null },
  }
  const made = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name: 'tried', limits },
  })
  t.equal(made.status, 201, made.body)
  t.same(made.json().limits, limits, 'shown as set')
  const sub = made.json().id as string
  const before = await shadowRefusals('sub_account.shadow.rate')
  const answers = []
  for (let i = 0; i < 6; i++) answers.push(await send(sub))
  t.same(
    answers.map((res) => res.status),
    [200, 200, 200, 200, 200, 429],
    'the enforced rate of 5 refuses the 6th; the shadow rate of 2 refuses none',
  )
  t.same(answers[5]!.json().violated_policies, ['sub_account.rate'])
  t.equal(
    (await shadowRefusals('sub_account.shadow.rate')) - before,
    3,
    'the 3rd to the 5th counted as what the shadow rate would have refused',
  )
  for (const res of answers.slice(0, 5))
    t.match(res.headers['ratelimit-policy'], /^"sub_account\.rate";q=5;w=3600$/, 'no RateLimit field of the shadow')

  // The request log marks what the shadow rate would have refused.
  await gw.app.requestLog!.flush()
  const logged = await callAs(gw.url, parent.apiKey, {
    path: `/v1/sub-accounts/requests?sub_account_id=${sub}&limit=10`,
    acting: 'self',
  })
  t.equal(logged.status, 200, logged.body)
  const marks = (logged.json().data as JsonBody[]).reverse().map((r) => r.would_refuse ?? null)
  t.same(
    marks,
    [null, null, ['sub_account.shadow.rate'], ['sub_account.shadow.rate'], ['sub_account.shadow.rate'], null],
    "the 3rd to the 5th are marked; the refused 6th is not the shadow's",
  )

  // Its customer's portal shows the same records, without the parent's trial.
  const link = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: `/v1/sub-accounts/${sub}/portal-sessions`,
    acting: 'self',
    json: { permissions: ['requests:read'] },
  })
  const exchanged = await fetch(`${gw.url}/portal/api/session`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ token: (link.json().url as string).split('#')[1] }),
  })
  const cookie = exchanged.headers.get('set-cookie')!.split(';')[0]!
  const portal = (await (await fetch(`${gw.url}/portal/api/requests`, { headers: { cookie } })).json()) as {
    data: JsonBody[]
  }
  t.equal(portal.data.length, 6, 'the portal lists the six')
  t.notOk(
    portal.data.some((r) => 'would_refuse' in r),
    'and no would_refuse',
  )

  // Alerts of both: the enforced rate's refusal, and the shadow rate's would-be refusals, said so.
  await gw.app.alerts.check()
  const events = await callAs(gw.url, parent.apiKey, {
    path: '/v1/sub-accounts/events?type=rate_limit.*',
    acting: 'self',
  })
  const mine = (events.json().data as JsonBody[]).filter((e) => e.target.id === sub)
  const byPolicy = new Map(mine.map((e) => [e.data.object.policy, e]))
  t.same([...byPolicy.keys()].sort(), ['sub_account.rate', 'sub_account.shadow.rate'], 'one event each')
  const shadowEvent = byPolicy.get('sub_account.shadow.rate')!
  t.equal(shadowEvent.data.shadow, true, "the shadow rate's event says so in its data")
  t.equal(shadowEvent.data.object.refused, 3, 'with what it would have refused')
  t.equal(byPolicy.get('sub_account.rate')!.data.shadow, undefined, "the enforced rate's does not")
})

t.test("the account's shadow limits from the CLI: set, shown, kept apart from the enforced", async (t) => {
  const { ok, fails } = cli({
    DATABASE_URL: gw.database.url,
    ENCRYPTION_KEY: TEST_ENCRYPTION_KEY,
    REDIS_URL,
    REDIS_KEY_PREFIX: keyPrefix,
  })
  const set = await ok(t, ['accounts', 'limits', '--account', parent.id, '--shadow', '--monthly-quota', '4'])
  t.same(set.account.limits, {
    rate: null,
    monthly_quota: null,
    shadow: { rate: null, monthly_quota: { requests: 4 } },
  })
  const both = await ok(t, ['accounts', 'limits', '--account', parent.id, '--monthly-quota', '1000'])
  t.same(
    both.account.limits,
    { rate: null, monthly_quota: { requests: 1000 }, shadow: { rate: null, monthly_quota: { requests: 4 } } },
    'an enforced change keeps the shadow',
  )
  await fails(t, ['accounts', 'limits', '--account', parent.id, '--shadow', '--rate', 'x'], /--rate/)
  const shown = await callAs(gw.url, parent.apiKey, { path: '/v1/sub-accounts/limits', acting: 'self' })
  t.same(shown.json().account.shadow, { rate: null, monthly_quota: { requests: 4 } }, 'GET limits shows it')

  const before = await shadowRefusals('account.shadow.monthly_quota')
  // The account's month so far is the first test's 5, past the shadow's 4: every request would be refused.
  const res = await send('self')
  t.equal(res.status, 200, 'the shadow quota refuses nothing')
  t.ok(
    await until(5_000, async () => (await shadowRefusals('account.shadow.monthly_quota')) > before),
    'counted as what it would have refused',
  )
  // Its usage.threshold_reached, from Postgres's count of the month (5 and more of 4): shadow.
  await gw.app.usageMeter.flush()
  const alerted = await until(10_000, async () => {
    await gw.app.alerts.check()
    const res = await callAs(gw.url, parent.apiKey, { path: '/v1/sub-accounts/events?type=usage.*', acting: 'self' })
    return (res.json().data as JsonBody[]).some((e) => e.data.object.policy === 'account.shadow.monthly_quota')
  })
  t.ok(alerted, "the shadow quota's thresholds alert")
  const usageEvents = await callAs(gw.url, parent.apiKey, {
    path: '/v1/sub-accounts/events?type=usage.*',
    acting: 'self',
  })
  for (const e of usageEvents.json().data as JsonBody[])
    t.equal(
      e.data.shadow,
      e.data.object.policy.includes('.shadow.') ? true : undefined,
      `${e.data.object.policy}: shadow said`,
    )
  const cleared = await ok(t, ['accounts', 'limits', '--account', parent.id, '--shadow', '--clear'])
  t.same(cleared.account.limits, { rate: null, monthly_quota: { requests: 1000 } }, 'the shadow cleared, the rest kept')
})

t.test('bad shadow limits: 400 validation_failed naming the field, nothing written', async (t) => {
  const cases: [string, unknown, RegExp][] = [
    ['a rate of 0', { shadow: { rate: { requests: 0, per_seconds: 1 } } }, /\/body\/limits\/shadow\/rate\/requests/],
    ['a shadow of a shadow', { shadow: { shadow: {} } }, /\/body\/limits\/shadow\/shadow/],
    [
      'a meter named requests',
      { shadow: { meters: { requests: { rate: null } } } },
      /\/body\/limits\/shadow\/meters\/requests/,
    ],
  ]
  for (const [what, limits, field] of cases) {
    const res = await callAs(gw.url, parent.apiKey, {
      method: 'POST',
      path: '/v1/sub-accounts',
      acting: 'self',
      json: { name: 'bad', limits },
    })
    checkProblem(t, res, 400, 'validation_failed', what)
    t.match(JSON.stringify(res.json().errors), field, `${what}: names the field`)
  }
  const listed = await callAs(gw.url, parent.apiKey, { path: '/v1/sub-accounts?q=bad', acting: 'self' })
  t.same(listed.json().data, [], 'none was created')
})
