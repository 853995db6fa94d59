// A replica killed (SIGKILL) in the middle of traffic and of the usage export (docs/billing.md, A
// replica killed): three replicas of one deployment on the real Postgres, two in this process and
// one in a process of its own, each serving its own sub-account, all reporting tokens, 10^5
// requests in all with the third killed midway. Once the
// periods close: the two that lived counted exactly what their upstream reported; the killed one
// lost at most what its upstream answered after its last flush; the receiver (deduplicating by
// event id) holds exactly what Postgres counted; and reconciliation explains every difference
// (the killed replica's as `replica_lost`), with nothing unexplained.
import { spawn, type ChildProcess } from 'node:child_process'
import type { ServerResponse } from 'node:http'
import { fileURLToPath } from 'node:url'
import { HTTP } from 'cloudevents'
import t from 'tap'
import { Pool } from 'undici'
import { mintKey } from '../../src/auth/mint.js'
import { createSubAccount } from '../../src/store/tenants.js'
import { freshDatabase } from '../helpers/db.js'
import { startReplicas } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'
import { type Delivery, startReceiver } from '../helpers/webhook-receiver.js'
import { watchCrashes } from './crashes.js'
import { RUN_TYPESCRIPT } from '../helpers/typescript.js'

const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url))
const SECRET = `whsec_${Buffer.alloc(32, 7).toString('base64')}`
const PERIOD_MS = 60_000
const REQUESTS = 100_000
/**
 * How long the traffic may take: 10^5 requests through three replicas on a loaded 2-core machine
 * ran past the suite's 300 s per file. The file asks its runner for 15 minutes; idle it takes 1–2.
 */
const TRAFFIC_LIMIT_MS = 600_000
t.setTimeout(900_000)
const crashes = watchCrashes(t)

// What the upstream answered, by the replica's tag in the path: its tokens, and when.
const answered: { tag: string; tokens: number; at: number }[] = []
const upstream = await startUpstream(t, (request, response: ServerResponse) => {
  const [path, query = ''] = request.url!.split('?')
  const tokens = Number(new URLSearchParams(query).get('tokens') ?? '0')
  answered.push({ tag: path!.split('/')[2]!, tokens, at: Date.now() })
  response.writeHead(200, { 'x-tokens-used': String(tokens) }).end('done')
})
const routes = [{ prefix: '/llm', upstream: upstream.url, meters: [{ name: 'tokens', header: 'X-Tokens-Used' }] }]
const receiver = await startReceiver(t, '/usage')
receiver.secret(SECRET)
const received = new Map<string, { key: string; units: number }>()
receiver.answer((delivery: Delivery, response) => {
  if (delivery.verified !== null) {
    const events = HTTP.toEvent({
      headers: { 'content-type': String(delivery.headers['content-type']) },
      body: delivery.body,
    })
    for (const event of [events].flat()) {
      const data = event.data as { meter: string; units: number; period_start: string }
      received.set(event.id, { key: `${event.subject} ${data.meter} ${data.period_start}`, units: data.units })
    }
  }
  response.writeHead(200).end('ok')
})

const usageEnv = { USAGE_PERIOD_SECONDS: '60', USAGE_CLOSE_GRACE_SECONDS: '1' }
const db = await freshDatabase(t)
const [a, b] = await startReplicas(t, 2, {
  database: db,
  redis: false,
  env: { ...usageEnv, USAGE_EXPORT_URL: receiver.url, USAGE_EXPORT_SECRET: SECRET },
  // Waited for 20 s once silent (120 s by default): a loaded machine's slow flush is not a loss.
  usagePeriods: { closeIntervalMs: 500, exportIntervalMs: 200, liveReplicaSeconds: 20 },
  gatewayConfig: { routes },
})
const sql = db.sql

// The victim: the gateway in a process of its own, the same database and periods, no push.
const child: ChildProcess = spawn(
  process.execPath,
  ['--expose-gc', ...RUN_TYPESCRIPT, 'test/faults/gateway-process.ts'],
  {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    env: {
      ...process.env,
      DATABASE_URL: db.url,
      FAULT_ROUTES: JSON.stringify({ routes }),
      FAULT_ENV: JSON.stringify(usageEnv),
    },
  },
)
let output = ''
child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
t.teardown(async () => {
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  await exited
})
const victimPort = await new Promise<number>((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error(`the gateway process did not start: ${output}`)), 60_000)
  child.on('message', (message: { type: string; port?: number }) => {
    if (message.type !== 'listening') return
    clearTimeout(timer)
    resolve(message.port!)
  })
})

const parent = await a!.createParent({ name: 'P' })
const tenants = await Promise.all(
  ['a', 'b', 'v'].map((name) => createSubAccount(sql, parent.id, { name, externalId: name, metadata: {} })),
)
const keys = await Promise.all(
  tenants.map((tenant) => mintKey(sql, { tenantId: tenant.id, name: 'k', scopes: [], withClientSecret: false })),
)
const targets = [
  { tag: 'a', url: a!.url, key: keys[0]!.apiKey },
  { tag: 'b', url: b!.url, key: keys[1]!.apiKey },
  { tag: 'v', url: `http://127.0.0.1:${victimPort}`, key: keys[2]!.apiKey },
]

/** The victim's flush mark, once it has written one: how far its counts are in Postgres. */
const victimMark = async () => {
  const marks = await sql<{ replica_id: string; flushed_through: Date }[]>`
    select replica_id, flushed_through from usage_flush_marks`
  return marks.length >= 3 ? marks : null
}

t.test('killed in the middle of traffic: only its unflushed second is lost, and that is explained', async (t) => {
  // 10^5 requests, then the last period's end (up to a minute) and the 20 s the victim is waited for.
  t.setTimeout(840_000)
  let stop = false
  let killed = false
  let victimSent = 0
  const pools = targets.map((target) => new Pool(target.url, { connections: 4 }))
  t.teardown(() => Promise.all(pools.map((pool) => pool.destroy())))
  const worker = async (i: number) => {
    const target = targets[i % 3]!
    for (let n = 0; !stop; n++) {
      try {
        const { statusCode, body } = await pools[i % 3]!.request({
          path: `/llm/${target.tag}/x?tokens=${(n * 37 + i) % 500}`,
          method: 'GET',
          headers: { authorization: `Bearer ${target.key}` },
        })
        await body.text()
        if (statusCode !== 200) throw new Error(`${target.tag}: ${statusCode}`)
        if (target.tag === 'v') victimSent++
      } catch (err) {
        if (target.tag === 'v' && killed) return // killed under it
        throw err
      }
    }
  }
  const workers = Array.from({ length: 12 }, (_, i) => worker(i))
  // Killed midway through 10^5 requests, once it has flushed and served its share so far.
  t.ok(
    await until(
      TRAFFIC_LIMIT_MS / 2,
      async () => answered.length >= REQUESTS / 2 && victimSent > 0 && (await victimMark()) !== null,
    ),
    'the victim serves',
  )
  const before = new Set((await victimMark())!.map((mark) => mark.replica_id))
  killed = true
  child.kill('SIGKILL')
  await exited
  t.ok(await until(TRAFFIC_LIMIT_MS, async () => answered.length >= REQUESTS), `${REQUESTS} requests answered in all`)
  stop = true
  await Promise.all(workers)
  const lastPeriodEnd = Math.floor(Date.now() / PERIOD_MS) * PERIOD_MS + PERIOD_MS

  // The periods close once the killed replica is no longer waited for (20 s here, 120 s by default).
  t.ok(
    await until(
      120_000,
      async () => {
        const [row] = await sql<{ closed_until: Date | null }[]>`select closed_until from usage_close`
        return (row?.closed_until?.getTime() ?? 0) >= lastPeriodEnd
      },
      250,
    ),
    'every period of the traffic closed',
  )
  // The victim: the one of the three whose mark is gone; the live ones flush on.
  const live = new Set(
    (await sql<{ replica_id: string }[]>`select replica_id from usage_flush_marks`).map((m) => m.replica_id),
  )
  const victim = [...before].filter((id) => !live.has(id))
  t.equal(victim.length, 1, 'one of the three is gone, the victim')
  const lost = await sql<{ replica_id: string; flushed_through: Date }[]>`
    select replica_id, flushed_through from usage_replica_losses`
  t.same(
    lost.map((row) => row.replica_id),
    victim,
    'the loss is recorded: the victim, and no other',
  )
  const loss = lost[0]

  const sums = await sql<{ tenant_id: string; meter: string; units: string }[]>`
    select tenant_id, meter, sum(units)::text as units from usage_period_units group by 1, 2`
  const meter = (tenant: number, name: string) =>
    Number(sums.find((s) => s.tenant_id === tenants[tenant]!.id && s.meter === name)?.units ?? 0)
  const reported = (tag: string, after = Number.NEGATIVE_INFINITY) =>
    answered.filter((x) => x.tag === tag && x.at >= after).reduce((sum, x) => sum + x.tokens, 0)
  const count = (tag: string, after = Number.NEGATIVE_INFINITY) =>
    answered.filter((x) => x.tag === tag && x.at >= after).length
  t.equal(meter(0, 'tokens'), reported('a'), 'a: every reported token counted')
  t.equal(meter(1, 'tokens'), reported('b'), 'b: every reported token counted')
  t.equal(meter(0, 'requests'), count('a'), 'a: every request counted')
  t.equal(meter(1, 'requests'), count('b'), 'b: every request counted')
  // What the victim's upstream answered after its last flush (less a few seconds: the upstream
  // answers before the gateway counts, later still on a loaded machine) is the most it may have lost.
  const unflushedFrom = loss!.flushed_through.getTime() - 3_000
  const lostTokens = reported('v') - meter(2, 'tokens')
  const lostRequests = count('v') - meter(2, 'requests')
  t.ok(
    lostTokens >= 0 && lostTokens <= reported('v', unflushedFrom),
    `v: lost ${lostTokens} of ${reported('v')} tokens, within the ${reported('v', unflushedFrom)} answered after its last flush`,
  )
  t.ok(
    lostRequests >= 0 && lostRequests <= count('v', unflushedFrom),
    `v: lost ${lostRequests} of ${count('v')} requests, within the ${count('v', unflushedFrom)} after its last flush`,
  )

  // The push delivers exactly what Postgres counted for the closed periods.
  const want = await sql<{ key: string; units: string }[]>`
    select u.tenant_id || ' ' || u.meter || ' ' || to_char(u.period_start at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as key,
           u.units::text as units
    from usage_period_units u where u.period_start < (select closed_until from usage_close)`
  const totals = () => {
    const got = new Map<string, number>()
    for (const { key, units } of received.values()) got.set(key, (got.get(key) ?? 0) + units)
    return got
  }
  const exact = await until(60_000, async () => {
    const got = totals()
    return got.size === want.length && want.every((row) => got.get(row.key) === Number(row.units))
  })
  t.ok(exact, `the receiver holds exactly what Postgres counted: ${JSON.stringify([...totals()])}`)

  const from = new Date(Math.floor(answered[0]!.at / PERIOD_MS) * PERIOD_MS).toISOString().slice(0, 19)
  const to = new Date(lastPeriodEnd).toISOString().slice(0, 19)
  const res = await callAs(a!.url, parent.apiKey, {
    path: `/v1/sub-accounts/usage/reconciliation?from=${from}Z&to=${to}Z`,
    acting: 'self',
  })
  t.equal(res.status, 200, res.body)
  const entries = res.json().data as {
    sub_account_id: string
    meter: string
    meter_units: number
    exported_units: number
    differences: { against: string; kind: string; units: number }[]
  }[]
  t.equal(entries.length, 6, 'three sub-accounts, two meters')
  for (const entry of entries) {
    t.equal(entry.exported_units, entry.meter_units, `${entry.meter} of ${entry.sub_account_id}: exported whole`)
    const kinds = entry.differences.map((d) => d.kind)
    t.notOk(kinds.includes('unexplained'), `nothing unexplained: ${JSON.stringify(entry.differences)}`)
    for (const kind of kinds) t.ok(['late', 'replica_lost', 'not_limited'].includes(kind), `${kind}: an expected kind`)
  }
  t.same(crashes, [], 'nothing crashed in this process')
})
