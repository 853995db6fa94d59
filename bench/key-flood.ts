// A flood of random well-formed keys (the checksum is public) against one gateway replica on real
// Postgres and Redis: how many Postgres queries a second it causes (store/key-lookup-batcher.ts
// paces them), and how long a real key never seen before takes, with and without the flood. Then
// a flood of token requests naming random client ids (oauth/client-lookups.ts paces those):
// the Postgres transactions a second it causes, as pg_stat_database counts them. Last, a flood of
// made-up portal session tokens as bearers (portal/credential-lookups.ts paces their lookups): the
// same count, with the Postgres queries and portal credentials a second.
// The flood runs in a child process (this file again, KEY_FLOOD_TARGET set), so that its load
// generator does not share an event loop with the probes. bench/README.md has the knobs.
import { type ChildProcess, spawn } from 'node:child_process'
import { randomBytes, randomUUID } from 'node:crypto'
import http from 'node:http'
import { performance } from 'node:perf_hooks'
import postgres from 'postgres'
import { createParentWithKey, mintKey } from '../src/auth/mint.js'
import { generate, generateApiKey } from '../src/auth/key-format.js'
import { SESSION_PREFIX } from '../src/auth/portal-credentials.js'
import {
  counts,
  createDatabase,
  deleteRedisPrefix,
  envInt,
  fmt,
  load,
  metric,
  ms,
  percentile,
  reportHead,
  request,
  ROOT,
  run,
  scrape,
  sleep,
  startGateway,
  startUpstream,
  stopChild,
  table,
  type Gateway,
  type Measured,
  type Server,
} from './lib.js'

const SECONDS = envInt('BENCH_DURATION', 10)
const CONNECTIONS = envInt('BENCH_CONNECTIONS', 50)
const PROBES = envInt('BENCH_N', 50)
const QUIET_PROBES = envInt('BENCH_QUIET_N', 200)
const BASELINE_TREE = process.env.BENCH_BASELINE_TREE || null
/** The portal flood's length: 5 s, as in bench/README.md, "2026-11-26: made-up portal credentials". */
const PORTAL_SECONDS = envInt('BENCH_PORTAL_DURATION', 5)
/** Which floods to run (keys also runs the probes): all three unless told. */
const FLOODS = new Set((process.env.BENCH_FLOODS || 'keys,token,portal').split(',').map((f) => f.trim()))
const PORTAL_PATH = '/portal/api/keys'
/**
 * The key flood's made-up keys: `tgw` (the default), well-formed gateway keys; `foreign`, values in
 * another format, as an imported key may be (32 random bytes in base64url after `sk_`), which the
 * gateway looks up the same way (docs/key-imports.md).
 */
const KEY_FORMAT = process.env.BENCH_KEY_FORMAT === 'foreign' ? 'foreign' : 'tgw'
const madeUpKey = () =>
  KEY_FORMAT === 'foreign' ? `sk_${randomBytes(32).toString('base64url')}` : generateApiKey().apiKey
/** A sparse trickle of cold keys, as real traffic has: never two within the pacer's interval. */
const PROBE_GAP_MS = 20
const PATH = '/v1/sub-accounts'

interface Latencies {
  p50: number
  p99: number
  failed: Record<string, number>
}
interface Side {
  name: string
  gateway: Gateway
  prefix: string
  tenantId: string
  warmKey: string
}
interface Probes {
  cold: number[]
  warm: number[]
  failed: { cold: Record<string, number>; warm: Record<string, number> }
}
interface KeyFloodResult {
  flood: Measured
  postgresPerSecond: number
  digestsPerSecond: number
  transactionsPerSecond: number
  quiet: { cold: Latencies; warm: Latencies }
  flooded: { cold: Latencies; warm: Latencies }
}
interface SideResult {
  side: string
  keys: KeyFloodResult | null
  token: { flood: Measured; transactionsPerSecond: number; clientIdsPerSecond: number } | null
  portal: {
    flood: Measured
    transactionsPerSecond: number
    postgresPerSecond: number
    credentialsPerSecond: number
  } | null
}

type FloodKind = 'keys' | 'token' | 'portal'

/**
 * The flood itself, in the child, for SECONDS: random well-formed keys on the proxy, or token
 * requests naming random client ids, or made-up portal session tokens as bearers (for
 * PORTAL_SECONDS). Any answer but 401 or 503 fails it.
 */
async function floodRole(target: string, pid: number, kind: FloodKind): Promise<void> {
  const common = { url: target, connections: CONNECTIONS, seconds: SECONDS, pid, allowed: [401, 503] }
  const result =
    kind === 'keys'
      ? await load({ ...common, headers: {}, vary: () => ({ authorization: `Bearer ${madeUpKey()}` }) })
      : kind === 'portal'
        ? await load({
            ...common,
            seconds: PORTAL_SECONDS,
            path: PORTAL_PATH,
            headers: {},
            vary: () => ({ authorization: `Bearer ${generate(SESSION_PREFIX)}` }),
          })
        : await load({
            ...common,
            method: 'POST',
            path: '/oauth2/token',
            headers: { 'content-type': 'application/x-www-form-urlencoded' },
            body: () => `grant_type=client_credentials&client_id=${randomUUID()}&client_secret=made-up`,
          })
  process.stdout.write(JSON.stringify(result))
}

/** Transactions of the database so far, as Postgres counts them (flushed about once a second). */
async function transactions(sql: postgres.Sql): Promise<number> {
  await sleep(1_500)
  const [row] =
    await sql`select pg_stat_clear_snapshot(), xact_commit + xact_rollback as n from pg_stat_database where datname = current_database()`
  return Number(row!.n)
}

function startFlood(gateway: Gateway, kind: FloodKind): { child: ChildProcess; done: Promise<Measured> } {
  const child = spawn(process.execPath, ['--import', 'tsx', 'bench/key-flood.ts'], {
    cwd: ROOT,
    env: {
      ...process.env,
      KEY_FLOOD_TARGET: gateway.url,
      KEY_FLOOD_PID: String(gateway.child.pid),
      KEY_FLOOD_KIND: kind,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  let out = ''
  child.stdout!.on('data', (chunk: Buffer) => {
    out += chunk.toString('utf8')
  })
  const done = new Promise<Measured>((resolve, reject) =>
    child.once('exit', (code) =>
      code === 0 ? resolve(JSON.parse(out) as Measured) : reject(new Error(`the flood exited ${code}`)),
    ),
  )
  return { child, done }
}

function summary(times: number[], failed: Record<string, number>): Latencies {
  const sorted = [...times].sort((a, b) => a - b)
  return { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), failed }
}

const noProbes = (): Probes => ({ cold: [], warm: [], failed: { cold: {}, warm: {} } })
const summaries = (p: Probes) => ({ cold: summary(p.cold, p.failed.cold), warm: summary(p.warm, p.failed.warm) })

/**
 * One probe of a side: a cold key (minted in Postgres just before, never seen by its gateway),
 * then its warm key, each after PROBE_GAP_MS.
 */
async function probeOnce(side: Side, sql: postgres.Sql, agent: http.Agent, into: Probes, i: number): Promise<void> {
  const base = new URL(side.gateway.url)
  const once = async (kind: 'cold' | 'warm', apiKey: string) => {
    await sleep(PROBE_GAP_MS)
    const t0 = performance.now()
    const answer = await request(agent, base, {
      method: 'GET',
      path: PATH,
      headers: { authorization: `Bearer ${apiKey}` },
    })
    into[kind].push(performance.now() - t0)
    if (answer.status !== 200) into.failed[kind][answer.status] = (into.failed[kind][answer.status] ?? 0) + 1
  }
  const minted = await mintKey(sql, {
    tenantId: side.tenantId,
    name: `cold ${i}`,
    scopes: ['sub_accounts:read'],
    withClientSecret: false,
  })
  await once('cold', minted.apiKey)
  await once('warm', side.warmKey)
}

async function startSide(name: string, tree: string, databaseUrl: string, upstream: Server, sql: postgres.Sql) {
  const prefix = `tgwkf:${name}:${Date.now()}:`
  const gateway = await startGateway({
    databaseUrl,
    upstreamUrl: upstream.url,
    tree,
    env: { REDIS_KEY_PREFIX: prefix },
  })
  const { account, key } = await sql.begin((tx) =>
    createParentWithKey(tx, { name: `key-flood ${name}`, externalId: null, extraScopes: [] }),
  )
  const first = await fetch(gateway.url + PATH, { headers: { authorization: `Bearer ${key.apiKey}` } })
  if (first.status !== 200) throw new Error(`${name}: GET ${PATH} answered ${first.status}`)
  return { name, gateway, prefix, tenantId: account.id, warmKey: key.apiKey }
}

/** The flood against one side, with PROBES probes of it meanwhile; the other sides idle. */
async function floodSide(side: Side, sql: postgres.Sql): Promise<Omit<KeyFloodResult, 'quiet'>> {
  console.error(`${side.name}: flood of random keys, ${CONNECTIONS} connections, ${SECONDS} s…`)
  const transactionsBefore = await transactions(sql)
  const before = await scrape(side.gateway.metricsPort)
  const started = performance.now()
  const flood = startFlood(side.gateway, 'keys')
  let floodOver = false
  const done = flood.done.finally(() => {
    floodOver = true
  })
  await sleep(1_000)
  const probes = noProbes()
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  for (let i = 0; i < PROBES && !floodOver; i++) await probeOnce(side, sql, agent, probes, i)
  agent.destroy()
  if (floodOver) console.error(`${side.name}: the flood ended before the probes did; raise BENCH_DURATION`)
  const floodResult = await done
  const seconds = (performance.now() - started) / 1000
  const after = await scrape(side.gateway.metricsPort)
  const transactionsDuring = (await transactions(sql)) - transactionsBefore
  const delta = (name: string, ...labels: string[]) => metric(after, name, ...labels) - metric(before, name, ...labels)
  return {
    flood: floodResult,
    postgresPerSecond: delta('tgw_store_lookups_total', 'tier="postgres"') / seconds,
    digestsPerSecond: delta('tgw_postgres_key_digests_total') / seconds,
    transactionsPerSecond: transactionsDuring / seconds,
    flooded: summaries(probes),
  }
}

/** Token requests naming random client ids against one side; the Postgres transactions they cost. */
async function floodTokens(side: Side, sql: postgres.Sql): Promise<NonNullable<SideResult['token']>> {
  console.error(
    `${side.name}: flood of token requests with random client ids, ${CONNECTIONS} connections, ${SECONDS} s…`,
  )
  const transactionsBefore = await transactions(sql)
  const before = await scrape(side.gateway.metricsPort)
  const started = performance.now()
  const flood = await startFlood(side.gateway, 'token').done
  const seconds = (performance.now() - started) / 1000
  const after = await scrape(side.gateway.metricsPort)
  const transactionsDuring = (await transactions(sql)) - transactionsBefore
  return {
    flood,
    transactionsPerSecond: transactionsDuring / seconds,
    clientIdsPerSecond:
      (metric(after, 'tgw_postgres_client_ids_total') - metric(before, 'tgw_postgres_client_ids_total')) / seconds,
  }
}

/**
 * Made-up portal session tokens as bearers against one side (a real session is never among them):
 * the Postgres transactions a second they cost, and the paced queries and credentials behind them.
 */
async function floodPortal(side: Side, sql: postgres.Sql): Promise<NonNullable<SideResult['portal']>> {
  console.error(
    `${side.name}: flood of made-up portal session tokens, ${CONNECTIONS} connections, ${PORTAL_SECONDS} s…`,
  )
  const transactionsBefore = await transactions(sql)
  const before = await scrape(side.gateway.metricsPort)
  const started = performance.now()
  const flood = await startFlood(side.gateway, 'portal').done
  const seconds = (performance.now() - started) / 1000
  const after = await scrape(side.gateway.metricsPort)
  const transactionsDuring = (await transactions(sql)) - transactionsBefore
  const delta = (name: string, ...labels: string[]) => metric(after, name, ...labels) - metric(before, name, ...labels)
  return {
    flood,
    transactionsPerSecond: transactionsDuring / seconds,
    postgresPerSecond: delta('tgw_store_lookups_total', 'tier="postgres"') / seconds,
    credentialsPerSecond: delta('tgw_postgres_portal_credentials_total') / seconds,
  }
}

async function main(): Promise<void> {
  const db = await createDatabase('keyflood')
  const results: SideResult[] = []
  const sides: Side[] = []
  let upstream: Server | null = null
  const sql = postgres(db.url, { max: 2, onnotice: () => {} })
  try {
    upstream = await startUpstream()
    sides.push(await startSide('gateway', ROOT, db.url, upstream, sql))
    if (BASELINE_TREE !== null) sides.push(await startSide('baseline', BASELINE_TREE, db.url, upstream, sql))
    // Without flood, the sides in turn, so that a slow patch of the machine lands on all of them.
    const quiet = sides.map(() => noProbes())
    if (FLOODS.has('keys')) {
      console.error(`${QUIET_PROBES} probes of each side without flood…`)
      const agents = sides.map(() => new http.Agent({ keepAlive: true, maxSockets: 1 }))
      for (let i = 0; i < QUIET_PROBES; i++)
        for (const [k, side] of sides.entries()) await probeOnce(side, sql, agents[k]!, quiet[k]!, i)
      for (const agent of agents) agent.destroy()
    }
    for (const [k, side] of sides.entries())
      results.push({
        side: side.name,
        keys: FLOODS.has('keys') ? { ...(await floodSide(side, sql)), quiet: summaries(quiet[k]!) } : null,
        token: FLOODS.has('token') ? await floodTokens(side, sql) : null,
        portal: FLOODS.has('portal') ? await floodPortal(side, sql) : null,
      })
  } finally {
    await sql.end({ timeout: 5 })
    for (const side of sides) {
      await stopChild(side.gateway.child)
      await deleteRedisPrefix(side.prefix)
    }
    await stopChild(upstream?.child)
    await db.drop()
  }
  const lat = (l: Latencies) =>
    `${ms(l.p50)} / ${ms(l.p99)}${Object.keys(l.failed).length === 0 ? '' : ` (${counts(l.failed)})`}`
  const keyed = results.flatMap((r) => (r.keys === null ? [] : [{ side: r.side, ...r.keys }]))
  const tokens = results.flatMap((r) => (r.token === null ? [] : [{ side: r.side, ...r.token }]))
  const portals = results.flatMap((r) => (r.portal === null ? [] : [{ side: r.side, ...r.portal }]))
  console.log(
    [
      ...reportHead('bench:key-flood'),
      ...(keyed.length === 0
        ? []
        : [
            '',
            `Flood: random ${KEY_FORMAT === 'foreign' ? 'values in a foreign format (sk_ + 43 base64url characters)' : 'well-formed keys'}, GET /v1/things/1, ${CONNECTIONS} connections, ${SECONDS} s, from a child process.`,
            `Probes: a cold key (minted just before, never seen) then a warm one, ${PROBE_GAP_MS} ms apart, GET ${PATH}: ${QUIET_PROBES} of each without flood (the sides in turn), ${PROBES} during each side's flood (p99 of ${PROBES} is their maximum).`,
            '',
            ...table(
              [
                'side',
                'flood req/s',
                'flood statuses',
                'Postgres queries/s',
                'key digests/s',
                'Postgres transactions/s',
              ],
              keyed.map((r) => [
                r.side,
                fmt(r.flood.perSecond),
                counts(r.flood.statuses),
                fmt(r.postgresPerSecond),
                fmt(r.digestsPerSecond),
                fmt(r.transactionsPerSecond),
              ]),
            ),
          ]),
      ...(tokens.length === 0
        ? []
        : [
            '',
            `Token flood: POST /oauth2/token naming random client ids, ${CONNECTIONS} connections, ${SECONDS} s, from a child process.`,
            '',
            ...table(
              ['side', 'token req/s', 'statuses', 'Postgres transactions/s', 'client ids/s'],
              tokens.map((r) => [
                r.side,
                fmt(r.flood.perSecond),
                counts(r.flood.statuses),
                fmt(r.transactionsPerSecond),
                fmt(r.clientIdsPerSecond),
              ]),
            ),
          ]),
      ...(portals.length === 0
        ? []
        : [
            '',
            `Portal flood: made-up session tokens as bearers, GET ${PORTAL_PATH}, ${CONNECTIONS} connections, ${PORTAL_SECONDS} s, from a child process.`,
            '',
            ...table(
              [
                'side',
                'flood req/s',
                'statuses',
                'Postgres transactions/s',
                'Postgres queries/s',
                'portal credentials/s',
              ],
              portals.map((r) => [
                r.side,
                fmt(r.flood.perSecond),
                counts(r.flood.statuses),
                fmt(r.transactionsPerSecond),
                fmt(r.postgresPerSecond),
                fmt(r.credentialsPerSecond),
              ]),
            ),
          ]),
      ...(keyed.length === 0
        ? []
        : [
            '',
            ...table(
              ['side', 'cold key, no flood', 'cold key, flood', 'warm key, no flood', 'warm key, flood'],
              keyed.map((r) => [
                r.side,
                lat(r.quiet.cold),
                lat(r.flooded.cold),
                lat(r.quiet.warm),
                lat(r.flooded.warm),
              ]),
            ),
            '',
            'Latencies: p50 / p99 ms, from sending to the last byte; a status other than 200 is counted in parentheses.',
          ]),
    ].join('\n'),
  )
}

const target = process.env.KEY_FLOOD_TARGET
if (target === undefined) run(main)
else
  run(() => floodRole(target, Number(process.env.KEY_FLOOD_PID), (process.env.KEY_FLOOD_KIND ?? 'keys') as FloodKind))
