// Prepaid credits over three replicas of one deployment (docs/api.md, Credits), each a gateway in a
// process of its own on the real Postgres and Redis, in front of a real upstream that reports the
// tokens of each answer: a grant posted twice with one Idempotency-Key, through two replicas at
// once, is one grant; a grant expiring in the middle of traffic stops the burn at its second on
// every replica; and with one replica killed (SIGKILL) mid-traffic, what the upstream served is
// what the grant gave, beyond the stated debt never more, and what Postgres burned is what was
// served, less at most what the killed replica had not written yet.
import type { ServerResponse } from 'node:http'
import t from 'tap'
import { Pool } from 'undici'
import { createParentWithKey, mintKey } from '../../src/auth/mint.js'
import { createSubAccount } from '../../src/store/tenants.js'
import { freshDatabase } from '../helpers/db.js'
import { callAs } from '../helpers/http.js'
import { agedRedis } from '../helpers/limits.js'
import { until } from '../helpers/poll.js'
import { REDIS_URL, redisClient, redisPrefix, requireRedis } from '../helpers/redis.js'
import { UNHURRIED_STORE_DEADLINES } from '../helpers/store-deadlines.js'
import { startUpstream } from '../helpers/upstream.js'
import { watchCrashes } from './crashes.js'
import { type ReplicaProcess, startReplicaProcess } from './replica-process.js'

t.setTimeout(600_000)
await requireRedis()
const crashes = watchCrashes(t)

/** What the upstream answered: the replica's tag in the path, the sub-account's, the tokens, when. */
const served: { replica: string; sub: string; tokens: number; at: number }[] = []
const upstream = await startUpstream(t, (request, response: ServerResponse) => {
  const [path, query = ''] = request.url!.split('?')
  const [, , replica, sub] = path!.split('/') as [string, string, string, string]
  const tokens = Number(new URLSearchParams(query).get('tokens') ?? '0')
  served.push({ replica, sub, tokens, at: Date.now() })
  response.writeHead(200, { 'x-tokens-used': String(tokens) }).end('done')
})
const servedTo = (sub: string, filter: (x: (typeof served)[number]) => boolean = () => true) =>
  served.filter((x) => x.sub === sub && filter(x)).reduce((sum, x) => sum + x.tokens, 0)

const db = await freshDatabase(t)
const sql = db.sql
const prefix = redisPrefix(t)
const redis = redisClient(t)
await agedRedis(redis, prefix)
const routes = [{ prefix: '/llm', upstream: upstream.url, meters: [{ name: 'tokens', header: 'X-Tokens-Used' }] }]
const started = await Promise.allSettled(
  ['0', '1', '2'].map(() =>
    startReplicaProcess(t, {
      databaseUrl: db.url,
      routes,
      env: { REDIS_URL, REDIS_KEY_PREFIX: prefix },
      // A loaded machine's lease call may take seconds: the replicas stay shared, never degraded,
      // which is what exact counts across replicas are about.
      tuning: {
        limitTimings: { callTimeoutMs: 10_000 },
        limitWarmWaitMs: 20_000,
        storeDeadlines: UNHURRIED_STORE_DEADLINES,
      },
    }),
  ),
)
const replicas = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []))
// A grant made through one replica reaches the others' cached records: all three listen (a
// replica subscribes after it listens: seconds, on a loaded machine). A setup that fails stops
// the replicas, or they would hold this process open until its timeout.
const subscribed =
  replicas.length === 3 &&
  (await until(60_000, async () => {
    const [, listening] = (await redis.pubsub('NUMSUB', `${prefix}invalidate`)) as [string, number | string]
    return Number(listening) === 3
  }))
if (!subscribed) {
  await Promise.all(replicas.map((replica) => replica.kill()))
  const failed = started.find((result) => result.status === 'rejected')
  throw failed?.reason ?? new Error('the three replicas did not all listen for invalidations within 60 s')
}

const { account: parent, key: parentKey } = await sql.begin((tx) =>
  createParentWithKey(tx, { name: 'P', externalId: null, extraScopes: [] }),
)

/** A sub-account whose proxied requests need credits of tokens, and its own key. */
async function subWithCredits(name: string) {
  const sub = await createSubAccount(sql, parent.id, {
    name,
    externalId: null,
    metadata: {},
    limits: { rate: null, monthly_quota: null, credits: { tokens: { required: true, low_threshold_percent: 10 } } },
  })
  const key = await mintKey(sql, { tenantId: sub.id, name: 'k', scopes: [], withClientSecret: false })
  return { id: sub.id, key: key.apiKey }
}

function postGrant(replica: ReplicaProcess, sub: string, body: Record<string, unknown>, idempotencyKey?: string) {
  return callAs(replica.url, parentKey.apiKey, {
    method: 'POST',
    path: `/v1/sub-accounts/${sub}/credits/grants`,
    acting: 'self',
    json: { meter: 'tokens', ...body },
    ...(idempotencyKey === undefined ? {} : { headers: [['Idempotency-Key', idempotencyKey]] }),
  })
}

/** One request reporting `tokens` through `replica`, as the sub-account: its status. */
async function send(replica: ReplicaProcess, sub: { id: string; key: string }, tokens: number): Promise<number> {
  const tag = replicas.indexOf(replica)
  const res = await callAs(replica.url, sub.key, { path: `/llm/${tag}/${sub.id}/x?tokens=${tokens}` })
  return res.status
}

/** Until a request through each of `among` passes: a grant made through one reached all. */
async function passesOnAll(sub: { id: string; key: string }, among = replicas) {
  for (const replica of among)
    if (!(await until(20_000, async () => (await send(replica, sub, 0)) === 200, 50)))
      throw new Error(`no request passed through replica ${replicas.indexOf(replica)}`)
}

/** What Postgres says was used of the meter: burned from the grants, and owed beyond them. */
async function burned(sub: string): Promise<{ fromGrants: number; debt: number }> {
  const [row] = await sql<{ from_grants: number; debt: number }[]>`
    select coalesce((select sum(units - units_left) from credit_grants where sub_account_id = ${sub}), 0)::float8 as from_grants,
           coalesce((select units from credit_debts where sub_account_id = ${sub} and meter = 'tokens'), 0)::float8 as debt`
  return { fromGrants: row!.from_grants, debt: row!.debt }
}

t.test('a grant posted twice with one Idempotency-Key, through two replicas at once, is one grant', async (t) => {
  const sub = await subWithCredits('twice')
  const key = `grant-${crypto.randomUUID()}`
  const body = { units: 50 }
  const both = await Promise.all([
    postGrant(replicas[0]!, sub.id, body, key),
    postGrant(replicas[1]!, sub.id, body, key),
  ])
  for (const res of both)
    t.ok(
      res.status === 201 || (res.status === 409 && res.json().code === 'idempotency_key_in_flight'),
      `201, or 409 while the other runs: ${res.status} ${res.body}`,
    )
  const made = both.filter((res) => res.status === 201).map((res) => res.json().id as string)
  t.ok(made.length >= 1, 'at least one made or replayed it')
  // Again, once both have answered, through the third: the same grant, replayed.
  const again = await postGrant(replicas[2]!, sub.id, body, key)
  t.equal(again.status, 201, again.body)
  t.equal(again.headers['idempotent-replayed'], 'true', 'replayed')
  t.same(new Set([...made, again.json().id]).size, 1, 'every answer names one grant')
  const rows = await sql`select id from credit_grants where sub_account_id = ${sub.id}`
  t.equal(rows.length, 1, 'one row')
  const events = await sql`
    select id from events where account_id = ${parent.id} and type = 'credits.granted' and data->'object'->>'sub_account_id' = ${sub.id}`
  t.equal(events.length, 1, 'one credits.granted')
  // And the proxy burns it once: answers of 10, one at a time through each replica in turn, pass
  // while the balance is above zero. Each replica may hold a lease of one unit (1 % of 50, at
  // least one) and admit one answer on it: 50 to 80 served, where two grants would let 100 pass.
  await passesOnAll(sub)
  const statuses: number[] = []
  const spent = () => statuses.length >= 3 && statuses.slice(-3).every((s) => s === 402)
  for (let i = 0; i < 15 && !spent(); i++) statuses.push(await send(replicas[i % 3]!, sub, 10))
  t.same(statuses.slice(-3), [402, 402, 402], `spent on every replica: ${statuses.join(' ')}`)
  const tokens = servedTo(sub.id)
  t.ok(tokens >= 50 && tokens <= 80, `${tokens} tokens served of one grant of 50`)
})

t.test('a grant expiring in the middle of traffic stops the burn at its second, on every replica', async (t) => {
  const sub = await subWithCredits('expiring')
  // Far enough ahead that the grant reaches every replica and traffic runs a while before it.
  const expiresAt = Date.now() + 8_000
  const made = await postGrant(replicas[0]!, sub.id, {
    units: 1_000_000,
    expires_at: new Date(expiresAt).toISOString(),
  })
  t.equal(made.status, 201, made.body)
  const grantId = made.json().id as string
  await passesOnAll(sub)
  if (Date.now() >= expiresAt - 2_000) throw new Error('the grant reached the replicas too late for the test')
  // Three workers a replica, one request at a time each, until a second past the expiry.
  const sent: { at: number; status: number }[] = []
  const worker = async (replica: ReplicaProcess, i: number) => {
    for (let n = 0; Date.now() < expiresAt + 1_000; n++) {
      const at = Date.now()
      sent.push({ at, status: await send(replica, sub, 1 + ((n * 7 + i) % 50)) })
    }
  }
  await Promise.all(replicas.flatMap((replica, r) => [0, 1, 2].map((i) => worker(replica, r * 3 + i))))
  const before = sent.filter((x) => x.at < expiresAt - 500)
  const after = sent.filter((x) => x.at >= expiresAt)
  t.ok(before.length > 0 && before.every((x) => x.status === 200), `before it: ${before.length} requests, all passed`)
  t.ok(after.length > 0, `${after.length} requests sent after it`)
  t.same(
    after.filter((x) => x.status !== 402),
    [],
    'every request sent at or after its second: 402 on every replica',
  )
  // What was served (the answers admitted before its second) is what Postgres burned: from the
  // grant, or owed by an answer whose units came after it. Each replica writes within a second.
  const tokens = servedTo(sub.id)
  let used = await burned(sub.id)
  t.ok(
    await until(20_000, async () => {
      used = await burned(sub.id)
      return used.fromGrants + used.debt === tokens
    }),
    `burned ${used.fromGrants} + owed ${used.debt} = served ${tokens}`,
  )
  const [grant] = await sql<{ units_left: number }[]>`
    select units_left::float8 as units_left from credit_grants where id = ${grantId}`
  t.ok(grant!.units_left > 0, `its rest (${grant!.units_left}) is gone, not burned`)
  const shown = await callAs(replicas[1]!.url, parentKey.apiKey, {
    path: `/v1/sub-accounts/${sub.id}/credits`,
    acting: 'self',
  })
  t.same(
    shown.json().balances,
    [{ meter: 'tokens', units_left: -used.debt }],
    'the balance: none left, less what is owed',
  )
})

t.test(
  'one replica killed mid-traffic: served = granted within the stated debt; burned = served, less its unwritten second',
  async (t) => {
    const sub = await subWithCredits('killed')
    const granted = 30_000
    t.equal((await postGrant(replicas[0]!, sub.id, { units: granted })).status, 201)
    await passesOnAll(sub)
    // Every replica has written a flush mark: the victim's last one bounds what it may lose.
    t.ok(
      await until(20_000, async () => (await sql`select 1 from usage_flush_marks`).length === 3),
      'three flush marks',
    )
    const [victim, ...live] = [replicas[2]!, replicas[0]!, replicas[1]!] as [ReplicaProcess, ...ReplicaProcess[]]
    const WORKERS_PER_REPLICA = 4
    const MAX_TOKENS = 100
    let killed = false
    const pools = replicas.map((replica) => new Pool(replica.url, { connections: WORKERS_PER_REPLICA }))
    t.teardown(() => Promise.all(pools.map((pool) => pool.destroy())))
    const refusals: number[] = []
    const worker = async (r: number, i: number) => {
      // Until this replica refuses: 402 once the balance is spent (its lease included).
      for (let n = 0; ; n++) {
        try {
          const { statusCode, body } = await pools[r]!.request({
            path: `/llm/${r}/${sub.id}/x?tokens=${1 + ((n * 37 + i) % MAX_TOKENS)}`,
            method: 'GET',
            headers: { authorization: `Bearer ${sub.key}` },
          })
          await body.text()
          if (statusCode === 402) {
            refusals.push(r)
            return
          }
          if (statusCode !== 200) throw new Error(`replica ${r}: ${statusCode}`)
        } catch (err) {
          if (replicas[r] === victim && killed) return // killed under it
          throw err
        }
      }
    }
    const workers = replicas.flatMap((_, r) =>
      Array.from({ length: WORKERS_PER_REPLICA }, (_, i) => worker(r, r * 10 + i)),
    )
    // Killed once half the grant was served, and the victim served its share so far.
    t.ok(
      await until(
        120_000,
        async () => servedTo(sub.id) >= granted / 2 && servedTo(sub.id, (x) => x.replica === '2') > 0,
      ),
      'half the grant served, the victim among them',
    )
    killed = true
    await victim.kill()
    await Promise.all(workers)
    t.equal(
      refusals.filter((r) => r !== 2).length,
      live.length * WORKERS_PER_REPLICA,
      'every live worker ended on a 402',
    )

    // The live replicas close as main.ts does: their last flush written, their marks taken away.
    // The mark left is the victim's, as its last flush wrote it.
    await Promise.all(live.map((replica) => replica.close()))
    const left = await sql<{ flushed_through: Date }[]>`select flushed_through from usage_flush_marks`
    t.equal(left.length, 1, "the victim's mark is left")
    const victimFlushedThrough = left[0]!.flushed_through.getTime()

    const tokens = servedTo(sub.id)
    const cap = Math.ceil(granted / 100)
    // The stated debt (docs/api.md, Credits): the answers in flight when the balance ran out.
    const debtBound = replicas.length * WORKERS_PER_REPLICA * MAX_TOKENS
    t.ok(
      tokens <= granted + debtBound,
      `served ${tokens} of ${granted}: over by at most the answers in flight (${debtBound})`,
    )
    // Under by at most the lease the victim held when killed (a lease is 1 % of the grant).
    t.ok(tokens >= granted - cap, `served ${tokens} of ${granted}: under by at most the victim's lease (${cap})`)
    const used = await burned(sub.id)
    const burnedAll = used.fromGrants + used.debt
    // What the victim's upstream answered after its last flush (less a few seconds: the upstream
    // answers before the gateway counts) is the most it may have left unwritten.
    const unwritten = servedTo(sub.id, (x) => x.replica === '2' && x.at >= victimFlushedThrough - 3_000)
    t.ok(burnedAll <= tokens, `burned ${burnedAll} (owed ${used.debt}): never more than served (${tokens})`)
    t.ok(
      tokens - burnedAll <= unwritten,
      `burned ${burnedAll} of ${tokens} served: short by ${tokens - burnedAll}, within the ${unwritten} the victim answered after its last flush`,
    )
    t.comment(
      `three replicas, one killed: ${tokens} served of ${granted} granted, ${burnedAll} burned (${used.debt} owed), the victim's unwritten ≤ ${unwritten}`,
    )
    t.same(crashes, [], 'nothing crashed in this process')
  },
)
