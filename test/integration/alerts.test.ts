// The alerts (docs/events.md#alerts) with three replicas of one deployment, over real
// sockets, Postgres and Redis: `usage.threshold_reached` at 80 % and 100 % of a quota once each,
// `rate_limit.exceeded` at most once per window with every refusal counted once, `api_key.expiring`
// 7 days and 1 day before expiry once each; each in the audit log, and delivered to a webhook
// receiver whose signatures `standardwebhooks` verifies.
import t, { type Test } from 'tap'
import { operatorOrigin } from '../../src/events/record.js'
import { setAccountLimits } from '../../src/limits/store.js'
import { actingHeaders, agents, subAccountVia } from '../helpers/gateway-load.js'
import { type Parent, startReplicas, type TestGateway } from '../helpers/gateway.js'
import { callAs, getOverAgent } from '../helpers/http.js'
import { UNHURRIED_LIMITS } from '../helpers/limits.js'
import type { JsonBody } from '../helpers/json.js'
import { runCliHere } from '../helpers/cli.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { sleep, until } from '../helpers/poll.js'
import { requireRedis } from '../helpers/redis.js'
import { type Receiver, startReceiver } from '../helpers/webhook-receiver.js'
import { startUpstream } from '../helpers/upstream.js'

await requireRedis()
const upstream = await startUpstream(t, (_request, response) => response.writeHead(200).end('ok'))
const env = { WEBHOOKS_ALLOW_INSECURE: 'true' }
const gatewayConfig = { routes: [{ prefix: '/v1/things', upstream: upstream.url }] }
const scopes = ['sub_accounts:read', 'sub_accounts:write', 'things:read']
const DAY_MS = 86_400_000

/** A webhook endpoint of `parent` subscribed to `eventTypes`, on a receiver of the test's. */
async function subscribe(gw: TestGateway, parent: Parent, eventTypes: string[]): Promise<Receiver> {
  const receiver = await startReceiver(t)
  const made = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts/webhook-endpoints',
    acting: 'self',
    json: { url: receiver.url, event_types: eventTypes },
  })
  if (made.status !== 201) throw new Error(made.body)
  receiver.secret(made.json().secret)
  return receiver
}

/** The parent's audit log of one type (or `x.*`), oldest first. */
async function auditLog(gw: TestGateway, parent: Parent, type: string): Promise<JsonBody[]> {
  const res = await callAs(gw.url, parent.apiKey, {
    path: `/v1/sub-accounts/events?type=${encodeURIComponent(type)}&limit=100`,
    acting: 'self',
  })
  if (res.status !== 200) throw new Error(res.body)
  return (res.json().data as JsonBody[]).reverse()
}

/** Every delivery arrived once per event id and verified with standardwebhooks: their payloads' events. */
function verifiedEvents(t: Test, receiver: Receiver): JsonBody[] {
  t.equal(
    receiver.deliveries.filter((d) => d.verified === null).length,
    0,
    'every delivery verifies with standardwebhooks',
  )
  return receiver.deliveries.map((d) => d.verified!.data as JsonBody)
}

t.test('usage.threshold_reached: 80 % and 100 %, once each per quota, from three replicas under load', async (t) => {
  const replicas = await startReplicas(t, 3, { env, gatewayConfig, ...UNHURRIED_LIMITS })
  const first = replicas[0]!
  const parent = await first.createParent({ scopes })
  // The account's quota is set before any request reads the account.
  await setAccountLimits(first.sql, parent.id, { monthly_quota: { requests: 150 } }, operatorOrigin())
  const receiver = await subscribe(first, parent, ['usage.*'])
  const sub = await subAccountVia(first.url, parent.apiKey, 'metered', { monthly_quota: { requests: 100 } })

  // Batches of 16 at once, round robin, as the sub-account until its 100 have passed (a unit a
  // replica still held when the burst ended passes in a later batch), then as the parent itself
  // until the account's 150 have (its quota counts both); 40 more batches at most.
  const pool = agents(t, 3)
  const spend = async (quota: number, headers: Record<string, string>) => {
    let passed = 0
    let refused = 0
    for (let batch = 0; passed < quota && batch < 40; batch++) {
      const answers = await Promise.all(
        Array.from({ length: 16 }, (_, j) => getOverAgent(replicas[j % 3]!.url, pool[j % 3]!, '/v1/things/x', headers)),
      )
      passed += answers.filter((a) => a.status === 200).length
      refused += answers.filter((a) => a.status === 429).length
    }
    return { passed, refused }
  }
  const bySub = await spend(100, actingHeaders(parent.apiKey, sub))
  t.equal(bySub.passed, 100, `the sub-account passes its quota exactly (${bySub.refused} refused)`)
  const bySelf = await spend(50, actingHeaders(parent.apiKey, 'self'))
  t.equal(bySelf.passed, 50, `the account passes what its quota leaves (${bySelf.refused} refused)`)

  const arrived = await until(15_000, async () => new Set(receiver.deliveries.map((d) => d.id)).size >= 4)
  t.ok(arrived, 'four alerts delivered')
  // Every replica checks again, at once, several times: nothing more is written.
  for (let round = 0; round < 3; round++) await Promise.all(replicas.map((gw) => gw.app.alerts.check()))
  const logged = await auditLog(first, parent, 'usage.*')
  const seen = logged.map((e) => {
    const object = e.data.object
    return `${e.target.type}:${e.target.id === sub ? 'sub' : e.target.id === parent.id ? 'parent' : '?'} ${object.policy} ${object.threshold_percent}`
  })
  t.same(
    seen.sort(),
    [
      'account:parent account.monthly_quota 100',
      'account:parent account.monthly_quota 80',
      'sub_account:sub sub_account.monthly_quota 100',
      'sub_account:sub sub_account.monthly_quota 80',
    ],
    'each threshold of each quota exactly once in the audit log',
  )
  for (const e of logged) {
    t.same(e.actor, { type: 'gateway', key_id: null }, 'written by the gateway')
    t.equal(e.account_id, parent.id, 'in the parent account')
    const { monthly_quota: quota, threshold_percent: percent, used, month } = e.data.object
    t.ok(used >= Math.ceil((quota.requests * percent) / 100), `used ${used} reaches ${percent} % of ${quota.requests}`)
    t.equal(month, new Date().toISOString().slice(0, 7), 'this month')
    t.equal(e.data.previous, null)
  }
  const delivered = verifiedEvents(t, receiver)
  t.same(
    delivered.map((e) => e.id).sort(),
    logged.map((e) => e.id).sort(),
    'each delivered once, as the audit log shows it',
  )
  t.same(
    [...receiver.countsById().values()].filter((n) => n !== 1),
    [],
    'no event delivered twice',
  )
})

t.test('rate_limit.exceeded: at most one per window, every refusal counted once', async (t) => {
  let clock = Date.now()
  const replicas = await startReplicas(t, 3, {
    env,
    gatewayConfig,
    ...UNHURRIED_LIMITS,
    alerts: { clock: () => clock, checkIntervalMs: 100 },
  })
  const first = replicas[0]!
  const parent = await first.createParent({ scopes })
  const receiver = await subscribe(first, parent, ['rate_limit.exceeded'])
  // 5 an hour: what passes after the first burst is the refill of a few seconds, at most.
  const sub = await subAccountVia(first.url, parent.apiKey, 'busy', { rate: { requests: 5, per_seconds: 3600 } })
  const pool = agents(t, 3)
  let refused = 0
  const burst = async (count: number) => {
    const answers = await Promise.all(
      Array.from({ length: count }, (_, i) =>
        getOverAgent(replicas[i % 3]!.url, pool[i % 3]!, '/v1/things/x', actingHeaders(parent.apiKey, sub)),
      ),
    )
    refused += answers.filter((a) => a.status === 429).length
  }
  const events = () => auditLog(first, parent, 'rate_limit.*')
  const reported = async () => (await events()).reduce((sum, e) => sum + e.data.object.refused, 0)
  const pending = async () => {
    const [row] = await first.sql<{ n: string }[]>`select coalesce(sum(refused), 0)::text as n from rate_limit_alerts`
    return Number(row!.n)
  }

  await burst(30)
  t.ok(refused >= 20, `${refused} refused`)
  t.ok(
    await until(
      10_000,
      async () => (await events()).length === 1 && (await reported()) + (await pending()) === refused,
    ),
    'a first event at once; every refusal reached Postgres',
  )
  const [firstEvent] = await events()
  t.ok(firstEvent.data.object.refused >= 1, `the first event reports ${firstEvent.data.object.refused}`)

  // More refusals within the window: counted, not reported yet.
  await burst(15)
  t.ok(await until(10_000, async () => (await reported()) + (await pending()) === refused), 'counted')
  await Promise.all(replicas.map((gw) => gw.app.alerts.check()))
  t.equal((await events()).length, 1, 'no second event within the window')

  // The window ends: the refusals since the first event are reported, once, whoever sees it.
  clock += 5 * 60_000
  t.ok(await until(10_000, async () => (await events()).length === 2), 'a second event once the window is over')
  await Promise.all(replicas.map((gw) => gw.app.alerts.check()))
  const [one, two] = await events()
  t.equal((await events()).length, 2, 'and only one')
  t.equal(await pending(), 0, 'nothing left unreported')
  t.equal(one.data.object.refused + two.data.object.refused, refused, 'the two events report every refusal once')
  t.equal(two.data.object.since, one.data.object.until, "the second counts from the first's end")
  t.equal(Date.parse(two.data.object.until) - Date.parse(one.data.object.until), 5 * 60_000, 'five minutes apart')
  t.same(
    { ...one.data.object, refused: 0, since: 0, until: 0 },
    {
      policy: 'sub_account.rate',
      tenant_id: sub,
      rate: { requests: 5, per_seconds: 3600 },
      refused: 0,
      since: 0,
      until: 0,
      window_seconds: 300,
    },
    'the policy, the tenant, its rate',
  )
  t.same(one.target, { type: 'sub_account', id: sub })

  t.ok(await until(10_000, async () => receiver.deliveries.length >= 2), 'both delivered')
  const delivered = verifiedEvents(t, receiver)
  t.same(delivered.map((e) => e.id).sort(), [one.id, two.id].sort(), 'as the audit log shows them')
})

t.test("rate_limit.exceeded of an account's rate: the parent's, whoever it acts as", async (t) => {
  let clock = Date.now()
  const replicas = await startReplicas(t, 3, {
    env,
    gatewayConfig,
    ...UNHURRIED_LIMITS,
    alerts: { clock: () => clock, checkIntervalMs: 100 },
  })
  const first = replicas[0]!
  const parent = await first.createParent({ scopes })
  await setAccountLimits(first.sql, parent.id, { rate: { requests: 4, per_seconds: 3600 } }, operatorOrigin())
  const receiver = await subscribe(first, parent, ['rate_limit.*'])
  const sub = await subAccountVia(first.url, parent.apiKey, 'unlimited')
  const pool = agents(t, 3)
  const answers = await Promise.all(
    Array.from({ length: 24 }, (_, i) =>
      getOverAgent(
        replicas[i % 3]!.url,
        pool[i % 3]!,
        '/v1/things/x',
        actingHeaders(parent.apiKey, i % 2 ? sub : 'self'),
      ),
    ),
  )
  const refused = answers.filter((a) => a.status === 429).length
  t.ok(refused >= 16, `${refused} refused by the account's rate`)
  const events = () => auditLog(first, parent, 'rate_limit.exceeded')
  t.ok(await until(10_000, async () => (await events()).length === 1), 'a first event')
  // Every replica's count in Postgres, then the window's end: the rest in a second event.
  t.ok(
    await until(10_000, async () => {
      const [row] = await first.sql<{ n: string }[]>`select coalesce(sum(refused), 0)::text as n from rate_limit_alerts`
      const reported = (await events()).reduce((sum, e) => sum + e.data.object.refused, 0)
      return reported + Number(row!.n) === refused
    }),
    'every refusal counted',
  )
  clock += 5 * 60_000
  const reportedAll = await until(10_000, async () => {
    const reported = (await events()).reduce((sum, e) => sum + e.data.object.refused, 0)
    return reported === refused
  })
  await Promise.all(replicas.map((gw) => gw.app.alerts.check()))
  const logged = await events()
  t.ok(reportedAll, 'every refusal reported')
  t.ok(logged.length <= 2, `${logged.length} events: the first, and the rest at the window's end`)
  t.equal(
    logged.reduce((sum, e) => sum + e.data.object.refused, 0),
    refused,
    'each refusal reported once',
  )
  for (const e of logged) {
    t.same(e.target, { type: 'account', id: parent.id }, 'about the parent account')
    t.match(e.data.object, { policy: 'account.rate', tenant_id: parent.id, rate: { requests: 4, per_seconds: 3600 } })
  }
  t.ok(await until(10_000, async () => receiver.deliveries.length >= logged.length), 'delivered')
  t.same(
    verifiedEvents(t, receiver)
      .map((e) => e.id)
      .sort(),
    logged.map((e) => e.id).sort(),
  )
})

t.test('api_key.expiring: 7 days and 1 day before, once each, with three replicas sweeping', async (t) => {
  let clock = Date.now()
  const replicas = await startReplicas(t, 3, {
    env,
    gatewayConfig,
    // Timers sweep too, every 50 ms, alongside the sweeps the test runs at once on every replica.
    alerts: { clock: () => clock, keySweepIntervalMs: 50, firstKeySweepAfterMs: 0 },
  })
  const first = replicas[0]!
  const parent = await first.createParent({ scopes })
  const receiver = await subscribe(first, parent, ['api_key.*'])
  const sub = await subAccountVia(first.url, parent.apiKey, 'keys')
  const mint = async (name: string, days: number) => {
    const res = await callAs(first.url, parent.apiKey, {
      method: 'POST',
      path: `/v1/sub-accounts/${sub}/api-keys`,
      acting: 'self',
      json: { name, scopes: ['things:read'], expires_at: new Date(Date.now() + days * DAY_MS).toISOString() },
    })
    if (res.status !== 201) throw new Error(res.body)
    return res.json().id as string
  }
  const tenDays = await mint('ten days', 10)
  const threeDays = await mint('three days', 3)
  const revoked = await mint('revoked', 10)
  const revoking = await callAs(first.url, parent.apiKey, {
    method: 'POST',
    path: `/v1/sub-accounts/${sub}/api-keys/${revoked}/revoke`,
    acting: 'self',
  })
  t.equal(revoking.status, 200)

  const expiring = async () => (await auditLog(first, parent, 'api_key.*')).filter((e) => e.type === 'api_key.expiring')
  const sweepAll = async () => {
    for (let round = 0; round < 3; round++) await Promise.all(replicas.map((gw) => gw.app.alerts.keys.sweep()))
  }
  const seen = async () =>
    (await expiring()).map(
      (e) =>
        `${e.target.id === tenDays ? 'ten' : e.target.id === threeDays ? 'three' : e.target.id} ${e.data.object.expires_in_days}`,
    )

  await sweepAll()
  t.same(await seen(), ['three 7'], 'nothing more than 7 days ahead; a key minted within 7 days: its 7-day event')
  clock = Date.now() + 2.5 * DAY_MS
  await sweepAll()
  t.same(await seen(), ['three 7', 'three 1'], 'then its 1-day event')
  clock = Date.now() + 3.5 * DAY_MS
  await sweepAll()
  t.same(await seen(), ['three 7', 'three 1', 'ten 7'], '7 days before: once; an expired key: nothing')
  clock = Date.now() + 9.5 * DAY_MS
  await sweepAll()
  t.same(await seen(), ['three 7', 'three 1', 'ten 7', 'ten 1'], '1 day before: once; the revoked key: never')

  const logged = await expiring()
  const [, , sevenDays] = logged
  t.same(sevenDays!.target, { type: 'api_key', id: tenDays })
  t.same(sevenDays!.actor, { type: 'gateway', key_id: null })
  t.equal(sevenDays!.data.object.sub_account_id, sub, 'the key as the API shows it, with its sub-account')
  t.equal(sevenDays!.data.object.name, 'ten days')
  t.equal(sevenDays!.data.previous, null)

  t.ok(
    await until(
      10_000,
      async () => receiver.deliveries.filter((d) => d.verified?.type === 'api_key.expiring').length >= 4,
    ),
    'delivered',
  )
  const delivered = verifiedEvents(t, receiver).filter((e) => e.type === 'api_key.expiring')
  t.same(delivered.map((e) => e.id).sort(), logged.map((e) => e.id).sort(), 'each once, as the audit log shows it')
})

t.test(
  'api_key.expiring for a key minted or rolled within a mark: within a second, not at the next sweep',
  async (t) => {
    // Swept at start, then not for an hour: only the sweep a mint asks for can write these.
    const [gw] = await startReplicas(t, 1, {
      env,
      gatewayConfig,
      alerts: { keySweepIntervalMs: 3_600_000, firstKeySweepAfterMs: 0 },
    })
    const parent = await gw!.createParent({ scopes })
    const sub = await subAccountVia(gw!.url, parent.apiKey, 'minted within')
    const mint = async (name: string, ms: number) => {
      const res = await callAs(gw!.url, parent.apiKey, {
        method: 'POST',
        path: `/v1/sub-accounts/${sub}/api-keys`,
        acting: 'self',
        json: { name, scopes: ['things:read'], expires_at: new Date(Date.now() + ms).toISOString() },
      })
      if (res.status !== 201) throw new Error(res.body)
      return res.json().id as string
    }
    const expiring = async () =>
      (await auditLog(gw!, parent, 'api_key.*'))
        .filter((e) => e.type === 'api_key.expiring')
        .map((e) => `${e.data.object.name} ${e.data.object.expires_in_days}`)
        .sort()
    const hours = await mint('twelve hours', 12 * 3_600_000)
    await mint('three days', 3 * DAY_MS)
    const tenDays = await mint('ten days', 10 * DAY_MS)
    t.ok(await until(10_000, async () => (await expiring()).length >= 2), 'written soon after the mints')
    t.same(await expiring(), ['three days 7', 'twelve hours 1'], 'the most urgent mark only; none beyond 7 days')

    const roll = async (keyId: string) => {
      const res = await callAs(gw!.url, parent.apiKey, {
        method: 'POST',
        path: `/v1/sub-accounts/${sub}/api-keys/${keyId}/roll`,
        acting: 'self',
        json: { expires_in_seconds: 0 },
      })
      t.equal(res.status, 201, res.body)
    }
    // Its new key ends when it did: told once already, it is not told again.
    await roll(hours)
    // A policy of 2 days brings the next roll's new key within the 7-day mark, unannounced.
    const policy = await callAs(gw!.url, parent.apiKey, {
      method: 'PATCH',
      path: `/v1/sub-accounts/${sub}`,
      acting: 'self',
      json: { key_policy: { allowed_scopes: null, max_ttl_seconds: 2 * 86_400, ip_allowlist: null } },
    })
    t.equal(policy.status, 200, policy.body)
    await roll(tenDays)
    t.ok(await until(10_000, async () => (await expiring()).length >= 3), "a roll's new key within a mark: at once")
    t.same(
      await expiring(),
      ['ten days 7', 'three days 7', 'twelve hours 1'],
      "the new key of a roll inherits its predecessor's marks",
    )
  },
)

t.test(
  'api_key.expiring: nothing farther after a nearer mark, nothing for a key revoked as it is marked',
  async (t) => {
    let clock = Date.now()
    // No sweep but the test's own.
    const [gw] = await startReplicas(t, 1, {
      env,
      gatewayConfig,
      alerts: { clock: () => clock, keySweepIntervalMs: 3_600_000, firstKeySweepAfterMs: 3_600_000 },
    })
    const parent = await gw!.createParent({ scopes })
    const sub = await subAccountVia(gw!.url, parent.apiKey, 'marked')
    const mint = async (name: string) => {
      const expiresAt = new Date(Date.now() + 10 * DAY_MS).toISOString()
      const res = await callAs(gw!.url, parent.apiKey, {
        method: 'POST',
        path: `/v1/sub-accounts/${sub}/api-keys`,
        acting: 'self',
        json: { name, scopes: ['things:read'], expires_at: expiresAt },
      })
      if (res.status !== 201) throw new Error(res.body)
      return res.json().id as string
    }
    const told = await mint('told a day')
    const revoked = await mint('revoked meanwhile')
    const expiring = async () =>
      (await auditLog(gw!, parent, 'api_key.*'))
        .filter((e) => e.type === 'api_key.expiring')
        .map((e) => `${e.data.object.name} ${e.data.object.expires_in_days}`)
    // What the rule before prompt sweeps left of a key minted within 7 days of its end: its 1-day
    // mark, and no 7-day one.
    await gw!.sql`insert into alert_marks (kind, subject, mark) values ('api_key.expiring', ${told}, '1d')`

    // Both within 7 days now. The revoke's transaction holds its key's row while the sweep runs.
    clock = Date.now() + 3.5 * DAY_MS
    let release!: () => void
    let rowHeld!: () => void
    const held = new Promise<void>((resolve) => (rowHeld = resolve))
    const revoke = gw!.sql.begin(async (tx) => {
      await tx`update api_keys set status = 'revoked', revoked_at = now() where id = ${revoked}`
      rowHeld()
      await new Promise<void>((resolve) => (release = resolve))
    })
    await held
    const sweep = gw!.app.alerts.keys.sweep()
    await sleep(500) // the sweep has read both keys as active by now
    release()
    await revoke
    await sweep
    const events = await expiring()
    t.same(
      events.filter((e) => e.startsWith('told')),
      [],
      'a key told 1 day: not 7 days after',
    )
    t.same(
      events.filter((e) => e.startsWith('revoked')),
      [],
      'a key revoked while the sweep marked it: nothing',
    )
  },
)

t.test("a quota's own alert_thresholds: its shares, not 80 and 100", async (t) => {
  const [gw] = await startReplicas(t, 1, { env, gatewayConfig, ...UNHURRIED_LIMITS })
  const parent = await gw!.createParent({ scopes })
  const sub = await subAccountVia(gw!.url, parent.apiKey, 'own shares', {
    monthly_quota: { requests: 20, alert_thresholds: [90, 25, 25] },
  })
  const shown = await callAs(gw!.url, parent.apiKey, { path: `/v1/sub-accounts/${sub}`, acting: 'self' })
  t.same(shown.json().limits.monthly_quota, { requests: 20, alert_thresholds: [25, 90] }, 'kept in order, once each')
  const pool = agents(t, 1)
  let passed = 0
  for (let i = 0; i < 30 && passed < 20; i++)
    if ((await getOverAgent(gw!.url, pool[0]!, '/v1/things/x', actingHeaders(parent.apiKey, sub))).status === 200)
      passed++
  t.equal(passed, 20, 'the quota passed whole')
  t.ok(await until(10_000, async () => (await auditLog(gw!, parent, 'usage.*')).length >= 2), 'two alerts written')
  for (let round = 0; round < 2; round++) await gw!.app.alerts.check()
  const logged = await auditLog(gw!, parent, 'usage.*')
  t.same(
    logged.map((e) => e.data.object.threshold_percent),
    [25, 90],
    'at 25 % and 90 %, once each, and not at 100 %',
  )
  t.same(logged[0]!.data.object.monthly_quota, { requests: 20, alert_thresholds: [25, 90] })

  for (const bad of [[0], [101], [1, 2, 3, 4, 5, 6], []]) {
    const res = await callAs(gw!.url, parent.apiKey, {
      method: 'PATCH',
      path: `/v1/sub-accounts/${sub}`,
      acting: 'self',
      json: { limits: { monthly_quota: { requests: 20, alert_thresholds: bad } } },
    })
    t.equal(res.status, 400, `alert_thresholds ${JSON.stringify(bad)}: 400`)
  }

  // The account's, from the operator's CLI.
  const cliEnv = { DATABASE_URL: gw!.database.url, ENCRYPTION_KEY: TEST_ENCRYPTION_KEY }
  const set = await runCliHere(
    ['accounts', 'limits', '--account', parent.id, '--monthly-quota', '500', '--quota-alerts', '50,90'],
    cliEnv,
  )
  t.equal(set.code, 0, set.stderr)
  t.same(JSON.parse(set.stdout).account.limits.monthly_quota, { requests: 500, alert_thresholds: [50, 90] })
  for (const args of [
    ['--quota-alerts', '50'],
    ['--monthly-quota', '5', '--quota-alerts', '0,50'],
  ]) {
    const refused = await runCliHere(['accounts', 'limits', '--account', parent.id, ...args], cliEnv)
    t.equal(refused.code, 1, `${args.join(' ')}: refused`)
    t.match(refused.stderr, /--quota-alerts/)
  }
})
