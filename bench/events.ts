// Management writes per second now that every change writes its event in its own transaction (and,
// with a webhook endpoint, queues its delivery there too), against the gateway from before events
// (BENCH_BASELINE_COMMIT, checked out as a git worktree), in the same run: each side a gateway
// process of its own tree on a fresh database of its own, migrated by its own code, the rounds
// alternating. bench/README.md says what it starts, what it prints and its knobs.
import { existsSync } from 'node:fs'
import http from 'node:http'
import { resolve } from 'node:path'
import { performance } from 'node:perf_hooks'
import postgres from 'postgres'
import {
  ADMIN_URL,
  baselineCheckout,
  checkInterrupted,
  cpuSeconds,
  createDatabase,
  deleteRedisPrefix,
  envInt,
  fmt,
  type Gateway,
  gitDescription,
  isInterrupted,
  type Measured,
  median,
  medianOf,
  percentile,
  REDIS_URL,
  reportHead,
  request,
  roundCells,
  run,
  runCli,
  type Server,
  sleep,
  startGateway,
  startReceiver,
  stopChild,
  table,
} from './lib.js'

const DURATION = envInt('BENCH_DURATION', 5)
const ROUNDS = envInt('BENCH_ROUNDS', 6)
const WARMUP = envInt('BENCH_WARMUP', 5)
const CONCURRENCY = envInt('BENCH_CONCURRENCY', 6)
/** The last commit before events were written in every change's transaction (1e73202). */
const BASELINE_COMMIT = process.env.BENCH_BASELINE_COMMIT || 'f6de42c'
/** 0: no side with a webhook endpoint. */
const WEBHOOK = envInt('BENCH_WEBHOOK', 1, 0) > 0
/** events / baseline writes/s; the webhook side has none (each write also makes an attempt there). */
const TARGET = 0.85

type SideName = 'baseline' | 'events' | 'webhook'
type Op = 'create' | 'update' | 'mint' | 'revoke'
const OPS: readonly Op[] = ['create', 'update', 'mint', 'revoke']
/** What each write answers when it worked. */
const EXPECTED: Record<Op, number> = { create: 201, update: 200, mint: 201, revoke: 200 }

interface Side {
  name: SideName
  gateway: Gateway
  databaseUrl: string
  databaseName: string
  prefix: string
  tree: string
  headers: Record<string, string>
  agent: http.Agent
  subs: string[]
  /** Active keys minted by the load, oldest first: the next revoke takes the first. */
  keys: { sub: string; id: string }[]
  /** Writes that succeeded, warm-up included: each is one event (and, on the webhook side, one delivery). */
  writes: number
  /** Each operation's latencies over the measured rounds, ms. */
  latencies: Record<Op, number[]>
}
interface Round extends Measured {
  side: SideName
  round: string
  /** µs of CPU the side's Postgres backends spent per write. */
  pgMicros: number
  /** The webhook side: deliveries received by the round's end, of the writes so far, and the wait after it for the rest. */
  backlog?: number
  drainMs?: number
}

const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} })
/** CPU seconds of each Postgres backend connected to `database` (the server is on this machine). */
async function backendCpu(database: string): Promise<Map<number, number>> {
  const rows = await admin<{ pid: number }[]>`select pid from pg_stat_activity where datname = ${database}`
  return new Map(rows.map(({ pid }) => [pid, cpuSeconds(pid)]))
}

let serial = 0
/** One write of `op` by the side's parent; its status, and the latency when it worked. */
async function write(side: Side, op: Op): Promise<{ op: Op; status: number; ms: number; body: string }> {
  const n = ++serial
  const base = new URL(side.gateway.url)
  const pick = () => side.subs[Math.floor(Math.random() * side.subs.length)]!
  // A revoke with no key minted yet mints one instead.
  if (op === 'revoke' && side.keys.length === 0) op = 'mint'
  // Values that differ every time, so that an update really changes the row (and writes its event).
  const changes = JSON.stringify({ name: `bench ${n}`, metadata: { n: String(n) } })
  const call =
    op === 'create'
      ? { method: 'POST' as const, path: '/v1/sub-accounts', body: changes }
      : op === 'update'
        ? { method: 'PATCH' as const, path: `/v1/sub-accounts/${pick()}`, body: changes }
        : op === 'mint'
          ? {
              method: 'POST' as const,
              path: `/v1/sub-accounts/${pick()}/api-keys`,
              body: JSON.stringify({ name: `bench ${n}`, scopes: ['things:read'] }),
            }
          : (() => {
              const key = side.keys.shift()!
              return { method: 'POST' as const, path: `/v1/sub-accounts/${key.sub}/api-keys/${key.id}/revoke` }
            })()
  const answer = await request(side.agent, base, { ...call, headers: side.headers })
  if (answer.status === EXPECTED[op]) {
    side.writes++
    if (op === 'create') side.subs.push((JSON.parse(answer.body) as { id: string }).id)
    if (op === 'mint')
      side.keys.push({ sub: call.path.split('/')[3]!, id: (JSON.parse(answer.body) as { id: string }).id })
  }
  return { op, status: answer.status, ms: answer.ms, body: answer.body }
}

/** CONCURRENCY loops of writes in the mix for `seconds`; any other status than expected fails it unless `tolerant`. */
async function load(side: Side, seconds: number, o: { timed: boolean; tolerant?: boolean }): Promise<Measured> {
  checkInterrupted()
  const cpuBefore = cpuSeconds(side.gateway.child.pid)
  const started = performance.now()
  const deadline = started + seconds * 1000
  const latencies: number[] = []
  const statuses: Record<string, number> = {}
  let failure: string | null = null
  const loop = async (worker: number) => {
    for (let i = worker; performance.now() < deadline && failure === null && !isInterrupted(); i++) {
      const result = await write(side, OPS[i % OPS.length]!)
      statuses[result.status] = (statuses[result.status] ?? 0) + 1
      if (result.status !== EXPECTED[result.op]) {
        if (!o.tolerant) failure = `${side.name} ${result.op}: ${result.status} ${result.body.slice(0, 300)}`
        continue
      }
      latencies.push(result.ms)
      if (o.timed) side.latencies[result.op].push(result.ms)
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, (_, worker) => loop(worker)))
  const elapsed = (performance.now() - started) / 1000
  const cpu = cpuSeconds(side.gateway.child.pid) - cpuBefore
  checkInterrupted()
  if (failure !== null) throw new Error(failure)
  const sorted = latencies.sort((a, b) => a - b)
  return {
    requests: sorted.length,
    perSecond: sorted.length / elapsed,
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
    cpuMicros: (cpu * 1e6) / sorted.length,
    mainThreadMicros: Number.NaN, // not measured here
    mainThreadSystemMicros: Number.NaN,
    readsPerRequest: Number.NaN,
    writesPerRequest: Number.NaN,
    idleShare: Number.NaN,
    cpuIdleShares: [],
    statuses,
  }
}

async function main(): Promise<void> {
  const baseline = process.env.BENCH_BASELINE_TREE
    ? {
        tree: process.env.BENCH_BASELINE_TREE,
        commit: gitDescription(process.env.BENCH_BASELINE_TREE),
        linked: true,
        remove: () => {},
      }
    : baselineCheckout(BASELINE_COMMIT)
  console.error(
    `baseline: ${baseline.commit} in ${baseline.tree}, node_modules ${baseline.linked ? "linked to this tree's (package-lock.json the same)" : 'by npm ci'}`,
  )
  // Another baseline may have events (to tell what later commits cost); the default must not.
  const baselineHasEvents = existsSync(resolve(baseline.tree, 'src/events'))
  if (baselineHasEvents && !process.env.BENCH_BASELINE_COMMIT && !process.env.BENCH_BASELINE_TREE)
    throw new Error(`${baseline.tree} has src/events: not a tree from before events`)
  if (baselineHasEvents) console.error(`note: the baseline ${baseline.commit} writes events too`)
  const names: SideName[] = ['baseline', 'events', ...(WEBHOOK ? (['webhook'] as const) : [])]
  const dbs = await Promise.all(names.map((name) => createDatabase(`events_${name}`)))
  const started: Server[] = []
  const sides: Side[] = []
  try {
    const receiver = WEBHOOK ? await startReceiver() : null
    if (receiver !== null) started.push(receiver)
    for (const [i, name] of names.entries()) {
      const db = dbs[i]!
      const prefix = `tgwev:${db.name}:`
      const tree = name === 'baseline' ? baseline.tree : undefined
      const gateway = await startGateway({
        databaseUrl: db.url,
        // No proxied request is made: the upstream is never called.
        upstreamUrl: 'http://127.0.0.1:9',
        tree,
        env: { REDIS_KEY_PREFIX: prefix, ...(name === 'webhook' ? { WEBHOOKS_ALLOW_INSECURE: 'true' } : {}) },
      })
      started.push(gateway)
      // The tree's own CLI: the baseline's database gets the baseline's migrations only.
      const parent = JSON.parse(
        await runCli(['accounts', 'create', '--name', 'bench'], { DATABASE_URL: db.url, REDIS_URL }, tree),
      ) as { api_key: string }
      sides.push({
        name,
        gateway,
        databaseUrl: db.url,
        databaseName: db.name,
        prefix,
        tree: tree ?? '.',
        headers: { authorization: `Bearer ${parent.api_key}`, 'x-service-acting-tenant': 'self' },
        agent: new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY }),
        subs: [],
        keys: [],
        writes: 0,
        latencies: { create: [], update: [], mint: [], revoke: [] },
      })
    }
    const webhook = sides.find((s) => s.name === 'webhook')
    if (webhook !== undefined) {
      const answer = await request(webhook.agent, new URL(webhook.gateway.url), {
        method: 'POST',
        path: '/v1/sub-accounts/webhook-endpoints',
        headers: webhook.headers,
        body: JSON.stringify({ url: `${receiver!.url}/hook`, event_types: ['sub_account.*', 'api_key.*'] }),
      })
      if (answer.status !== 201) throw new Error(`POST …/webhook-endpoints answered ${answer.status}: ${answer.body}`)
    }
    // The first write of each: a management rate in a Redis prefix never seen refuses for its first 3 s.
    for (const side of sides) {
      for (let attempt = 0; ; attempt++) {
        const result = await write(side, 'create')
        if (result.status === 201) break
        if (result.status !== 429 || attempt >= 10)
          throw new Error(`${side.name} create: ${result.status} ${result.body}`)
        await sleep(1000)
      }
    }

    const deliveries = async (side: Side) => {
      const start = performance.now()
      while ((await receiver!.received(Number.MAX_SAFE_INTEGER)).total < side.writes) {
        checkInterrupted()
        if (performance.now() - start > 120_000) throw new Error('webhook deliveries did not arrive within 120 s')
        await sleep(20)
      }
      return performance.now() - start
    }
    const measure = async (side: Side, seconds: number, round: string, timed: boolean): Promise<Round> => {
      await sleep(500)
      const pgBefore = await backendCpu(side.databaseName)
      const measured = await load(side, seconds, { timed, tolerant: !timed })
      // A backend that left during the round is missed, one that came counts from its start.
      let pgCpu = 0
      for (const [pid, cpu] of await backendCpu(side.databaseName)) pgCpu += cpu - (pgBefore.get(pid) ?? 0)
      const pgMicros = (pgCpu * 1e6) / measured.requests
      const r: Round = { ...measured, side: side.name, round, pgMicros }
      let line = `  ${side.name} ${round}: ${fmt(r.perSecond)} writes/s, p50 ${r.p50.toFixed(2)} ms, p99 ${r.p99.toFixed(2)} ms, CPU/write ${r.cpuMicros.toFixed(0)} µs gateway, ${pgMicros.toFixed(0)} µs Postgres`
      if (side.name === 'webhook') {
        // Every delivery made before the next side's round, so that none of its work lands there.
        r.backlog = side.writes - (await receiver!.received(Number.MAX_SAFE_INTEGER)).total
        r.drainMs = await deliveries(side)
        line += `; ${fmt(r.backlog)} deliveries still due at its end, all made ${fmt(r.drainMs)} ms later`
      }
      console.error(line)
      return r
    }
    console.error(`warming up, ${WARMUP} s per side…`)
    for (const side of sides) await measure(side, WARMUP, 'warm-up', false)

    // Pre-flight: an event per write where events exist, none where they do not; a delivery per write with the endpoint.
    for (const side of sides) {
      const sql = postgres(side.databaseUrl, { max: 1, onnotice: () => {} })
      try {
        const [{ events }] = await sql<[{ events: string | null }]>`select to_regclass('events')::text as events`
        if (side.name === 'baseline') {
          if (events !== null && !baselineHasEvents) throw new Error('the baseline database has an events table')
          continue
        }
        const [counts] = await sql<[{ events: number; deliveries: number }]>`
          select (select count(*)::int from events
                  where actor ->> 'type' = 'api_key' and type not like 'webhook_endpoint.%') as events,
                 (select count(*)::int from webhook_deliveries) as deliveries`
        const deliveriesExpected = side.name === 'webhook' ? side.writes : 0
        if (counts!.events !== side.writes || counts!.deliveries !== deliveriesExpected)
          throw new Error(
            `${side.name}: ${side.writes} writes made ${counts!.events} events and ${counts!.deliveries} deliveries`,
          )
      } finally {
        await sql.end()
      }
    }

    console.error(`measuring, ${ROUNDS} × ${DURATION} s per side, ${CONCURRENCY} writes in flight…`)
    const rounds: Round[] = []
    for (let r = 1; r <= ROUNDS; r++) {
      // The order turns every round, so that no side always follows the same other.
      const order = sides.map((_, i) => sides[(i + r - 1) % sides.length]!)
      for (const side of order) rounds.push(await measure(side, DURATION, String(r), true))
    }
    report(rounds, sides, `${baseline.commit}${baselineHasEvents ? ' (with events)' : ' (before events)'}`)
    const delivered = receiver === null ? 0 : (await receiver.received(Number.MAX_SAFE_INTEGER)).total
    if (webhook !== undefined)
      console.log(
        `webhook deliveries  ${fmt(delivered)} received for ${fmt(webhook.writes)} writes of the webhook side (warm-up and first write included)`,
      )
  } catch (err) {
    if (!isInterrupted()) for (const server of started) console.error(`${server.url} wrote:\n${server.output()}`)
    throw err
  } finally {
    for (const server of started.reverse()) await stopChild(server.child).catch((err) => console.error(err))
    for (const side of sides) await deleteRedisPrefix(side.prefix)
    for (const db of dbs) await db.drop()
    await admin.end()
    baseline.remove()
  }
}

function report(rounds: Round[], sides: Side[], baselineCommit: string): void {
  const of = (side: SideName) => rounds.filter((r) => r.side === side)
  const medians = new Map(
    sides.map(({ name }) => [
      name,
      { ...medianOf(of(name)), side: name, round: 'median', pgMicros: median(of(name).map((r) => r.pgMicros)) },
    ]),
  )
  const base = medians.get('baseline')!
  const lines = [
    ...reportHead('bench:events'),
    `load      ${CONCURRENCY} writes in flight over keep-alive sockets, each loop in turn: create a sub-account, PATCH one (name and metadata new), mint a key, revoke a key; ${DURATION} s rounds, ${WARMUP} s warm-up per side, ${ROUNDS} rounds, the sides' order turning every round`,
    `baseline ${baselineCommit}, its own migrations, on a database of its own`,
    `events   ${gitDescription()}, on a database of its own`,
    ...(medians.has('webhook')
      ? [
          `webhook  the same code, on a database of its own, one active endpoint subscribed to sub_account.* and api_key.* (bench/servers.js receiver, 204)`,
        ]
      : []),
    '',
    ...table(
      ['side', 'round', 'writes', 'writes/s', 'p50 ms', 'p99 ms', 'CPU µs/write', 'Postgres CPU µs/write'],
      [...rounds, ...medians.values()].map((r) => [r.side, r.round, ...roundCells(r), r.pgMicros.toFixed(1)]),
      2,
    ),
    "(median rows: medians over the rounds, writes their sum; CPU µs/write: the gateway process, user + system, per write; Postgres: the side's backends, from /proc)",
    '',
  ]
  for (const name of ['events', 'webhook'] as const) {
    const side = medians.get(name)
    if (side === undefined) continue
    const ratio = side.perSecond / base.perSecond
    const byRound = of(name).map((r, i) => r.perSecond / of('baseline')[i]!.perSecond)
    lines.push(
      `${`${name} / baseline`.padEnd(20)}writes/s ${ratio.toFixed(3)}${name === 'events' ? ` (target ≥ ${TARGET}: ${ratio >= TARGET ? 'met' : 'NOT MET'})` : ''}, ` +
        `p50 ${(side.p50 / base.p50).toFixed(3)}, p99 ${(side.p99 / base.p99).toFixed(3)}, CPU/write gateway ${(side.cpuMicros / base.cpuMicros).toFixed(3)}, Postgres ${(side.pgMicros / base.pgMicros).toFixed(3)}`,
      `                    round by round: ${byRound.map((x) => x.toFixed(3)).join(', ')} (median ${median(byRound).toFixed(3)})`,
    )
  }
  const hooks = of('webhook')
  if (hooks.length > 0)
    lines.push(
      `webhook deliveries  due at a round's end: ${hooks.map((r) => fmt(r.backlog!)).join(', ')}; all made within ${hooks.map((r) => fmt(r.drainMs!)).join(', ')} ms of it`,
    )
  lines.push(
    '',
    'p50 ms of each write over the measured rounds:',
    ...table(
      ['side', ...OPS],
      sides.map((side) => [
        side.name,
        ...OPS.map((op) => {
          const sorted = [...side.latencies[op]].sort((a, b) => a - b)
          return sorted.length === 0 ? '-' : `${percentile(sorted, 0.5).toFixed(2)} (${fmt(sorted.length)})`
        }),
      ]),
    ),
  )
  console.log(lines.join('\n'))
}

run(main)
