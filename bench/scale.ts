// Scale (issue 6), run by hand: how the gateway's cost grows with its data. Results: bench/RESULTS.md.
//   npm run bench:scale
//   BENCH_SCALES=1000,10000 BENCH_MEMORY_KEYS=0 BENCH_PROXY_ROUNDS=0 npm run bench:scale   (quick)
// env (defaults):
//   BENCH_SCALES=1000,10000,100000   sub-accounts under one parent, one fresh database each
//   BENCH_KEYS_PER_SUB=10, BENCH_USAGE_DAYS=30
//   BENCH_N=2000, BENCH_WARMUP=100   timed and untimed samples per operation
//   BENCH_PROXY_ROUNDS=2, BENCH_PROXY_DURATION=10, BENCH_PROXY_WARMUP=2, BENCH_PROXY_CONNECTIONS=50
//                                    proxy ratio at the largest scale (0 rounds: skip); BENCH_BARE_HEADERS
//                                    as in bench/proxy.ts (same: the bare proxy gets the gateway's request)
//   BENCH_MEMORY_KEYS=1000000, BENCH_MEMORY_CONNECTIONS=32
//                                    RSS at the largest scale while that many seeded keys are used once each (0: skip)
//   BENCH_MEMORY_RUNTIMES=dist       dist: compiled into /tmp as the image is (and as the proxy comparison runs it); tsx: from src/ under tsx; or both
//   BENCH_GATEWAY_DIST=              a compiled gateway to run instead (e.g. one with a proposed change)
//   BENCH_GATEWAY_NODE_ARGS=         extra node flags for the gateway processes, e.g. --max-old-space-size=160
//   BENCH_ALTER_DATABASE=            what-if settings `name=value;…` set on each seeded database (ALTER
//                                    DATABASE … SET), e.g. max_parallel_workers_per_gather=0, or auto_explain
//   BENCH_SEED_SQL=                  what-if SQL run on each seeded database, e.g. drop index if exists …
//   BENCH_SKIP_LATENCY=1             only seed the largest scale and run the proxy ratio and memory
//   BENCH_EXPLAIN_OUT=/tmp/tgw-scale-explain-<time>.txt, BENCH_KEEP=1 (keep the databases)
//   BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres, BENCH_REDIS_URL=redis://127.0.0.1:6379
//   BENCH_NODE=image                 the node of the processes it starts, as in bench/proxy.ts (bench/lib.ts)
//
// For each scale: a fresh database seeded in bulk (bench/seed.ts), EXPLAIN (ANALYZE, BUFFERS) of
// every query the gateway sends for the measured operations (the SQL is captured from the store
// functions in src/store as they run, not copied; custom and generic plan), then one gateway
// built in this process (buildApp, real Postgres pool and Redis, a key prefix of this run's own)
// on a loopback port, and requests one at a time over one keep-alive connection, so the figures
// are latencies. Operations are measured in turn, sample by sample. The cache state of each
// sample is prepared, untimed, before it: `clearLocal()` stops the in-process cache trusting
// what it holds (Redis serves), and deleting the Redis entries as well leaves Postgres to answer.
// Each sample's store lookups are counted (tgw_store_lookups_total) to show that the state was
// the one claimed. The upstream is bench/proxy.ts in its `upstream` role, in its own process.
// At the largest scale, the gateway as its own process: the proxy ratio of bench/proxy.ts
// (gateway vs bare @fastify/http-proxy, alternating rounds; plus acting across every sub-account)
// on the seeded database, and RSS while BENCH_MEMORY_KEYS distinct seeded keys are used once each.
// Every database is dropped and every Redis key of the run deleted at the end, also on Ctrl-C.
import { spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { appendFileSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import { createRequire } from 'node:module'
import type { AddressInfo } from 'node:net'
import os from 'node:os'
import { resolve } from 'node:path'
import { performance } from 'node:perf_hooks'
import type { FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import postgres from 'postgres'
import { buildApp } from '../src/app.js'
import { cacheKeys } from '../src/cache/index.js'
import { loadConfig } from '../src/config.js'
import { encodeCursor } from '../src/management/paging.js'
import { createMetrics, type Metrics } from '../src/ops/metrics.js'
import { openStore, type Store } from '../src/store/db.js'
import { findKeyByDigest, listKeys } from '../src/store/keys.js'
import {
  hasActiveSubAccounts,
  createSubAccount,
  findSubAccountIdByExternalId,
  getSubAccount,
  getTenant,
  listSubAccounts,
  setSubAccountStatus,
} from '../src/store/tenants.js'
import { usageRows } from '../src/store/usage.js'
import { utcDay } from '../src/usage/meter.js'
import {
  ADMIN_URL,
  bareHeaders,
  buildDist,
  captureOutput,
  children,
  cpuSeconds,
  envForCommand,
  fmt,
  forkChild,
  freePorts,
  gatewayArgs,
  type GatewayRuntime,
  gitDescription,
  imageNodeFlags,
  median,
  packageVersion,
  parseGatewayRuntime,
  percentile,
  positiveInt,
  PROXIED_PATH,
  REDIS_URL,
  ROOT,
  serverNode,
  type ServerNode,
  sleep,
  stopChild,
  UPSTREAM_BODY,
  waitForGateway,
} from './lib.js'
import { extIdOf, isSeededDeactivated, keyDigest, keyFor, seed, subIdOf, type Seeded } from './seed.js'

function nonNegativeInt(name: string, fallback: number): number {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  if (!/^\d+$/.test(raw)) throw new Error(`${name} must be a whole number, got "${raw}"`)
  return Number(raw)
}

const SCALES = (process.env.BENCH_SCALES || '1000,10000,100000').split(',').map((s) => {
  const n = Number(s.trim())
  if (!Number.isSafeInteger(n) || n < 100) throw new Error(`BENCH_SCALES: each scale must be a whole number ≥ 100, got "${s}"`)
  return n
})
const KEYS_PER_SUB = positiveInt('BENCH_KEYS_PER_SUB', 10)
const USAGE_DAYS = positiveInt('BENCH_USAGE_DAYS', 30)
const N = positiveInt('BENCH_N', 2000)
const WARMUP = positiveInt('BENCH_WARMUP', 100)
const MEMORY_KEYS = nonNegativeInt('BENCH_MEMORY_KEYS', 1_000_000)
const MEMORY_CONNECTIONS = positiveInt('BENCH_MEMORY_CONNECTIONS', 32)
const MEMORY_RUNTIMES = (process.env.BENCH_MEMORY_RUNTIMES || 'dist').split(',').map((r) => parseGatewayRuntime('BENCH_MEMORY_RUNTIMES', r))
const PROXY_ROUNDS = nonNegativeInt('BENCH_PROXY_ROUNDS', 2)
const PROXY_DURATION = positiveInt('BENCH_PROXY_DURATION', 10)
const PROXY_CONNECTIONS = positiveInt('BENCH_PROXY_CONNECTIONS', 50)
const PROXY_WARMUP = positiveInt('BENCH_PROXY_WARMUP', 2)
const KEEP = process.env.BENCH_KEEP === '1'
/**
 * What-if settings for the seeded databases, `name=value;name=value`, applied with ALTER
 * DATABASE … SET after seeding, so that every connection the gateway opens has them (for
 * example max_parallel_workers_per_gather=0, or auto_explain to log the plans the gateway ran).
 */
const ALTER_DATABASE = (process.env.BENCH_ALTER_DATABASE ?? '')
  .split(';')
  .filter((s) => s.trim() !== '')
  .map((setting) => {
    const match = /^\s*([a-z_][a-z0-9_.]*)\s*=\s*(.*?)\s*$/.exec(setting)
    if (match === null) throw new Error(`BENCH_ALTER_DATABASE: "${setting}" is not name=value`)
    return { name: match[1]!, value: match[2]! }
  })
/** What-if SQL run on each seeded database after seeding, e.g. `drop index if exists usage_daily_day_tenant`. */
const SEED_SQL = process.env.BENCH_SEED_SQL ?? ''
/** 1: only seed, then the proxy ratio and memory runs at the largest scale (no EXPLAIN, no latencies). */
const SKIP_LATENCY = process.env.BENCH_SKIP_LATENCY === '1'
/** A compiled gateway to run for the memory run instead of compiling src/ (e.g. with a proposed change). */
const GATEWAY_DIST = process.env.BENCH_GATEWAY_DIST || null
/** Extra node flags for the gateway processes (proxy ratio, memory), e.g. --max-old-space-size=160. */
const GATEWAY_NODE_ARGS = (process.env.BENCH_GATEWAY_NODE_ARGS ?? '').split(' ').filter((a) => a !== '')
const EXPLAIN_OUT = process.env.BENCH_EXPLAIN_OUT || `/tmp/tgw-scale-explain-${new Date().toISOString().replace(/[:.]/g, '-')}.txt`
const PROXY_SCRIPT = resolve(ROOT, 'bench/proxy.ts')
const RUN = randomBytes(4).toString('hex')

const log = (message: string) => console.error(message)

// Ctrl-C stops the current loop; the cleanup in main's finally still runs. A second one kills.
let interrupted = false
let running: { stop(): void } | null = null
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    interrupted = true
    log(`\n${signal}: stopping and cleaning up (again to kill at once)…`)
    running?.stop()
  })
}
function checkInterrupted(): void {
  if (interrupted) throw new Error('interrupted')
}

// ---------------------------------------------------------------------------------------------
// One request at a time over one keep-alive socket.

interface Call {
  method: 'GET' | 'POST'
  path: string
  headers?: Record<string, string>
  body?: unknown
}

interface Answer {
  status: number
  body: string
}

class Client {
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  constructor(readonly port: number) {}

  send(call: Call): Promise<Answer> {
    return new Promise((done, fail) => {
      const payload = call.body === undefined ? undefined : Buffer.from(JSON.stringify(call.body))
      const headers: Record<string, string> = { ...call.headers }
      if (payload !== undefined) {
        headers['content-type'] = 'application/json'
        headers['content-length'] = String(payload.length)
      }
      const request = http.request({ host: '127.0.0.1', port: this.port, method: call.method, path: call.path, headers, agent: this.agent }, (res) => {
        const chunks: Buffer[] = []
        res.on('data', (chunk: Buffer) => chunks.push(chunk))
        res.on('end', () => done({ status: res.statusCode!, body: Buffer.concat(chunks).toString('utf8') }))
        res.on('error', fail)
      })
      request.on('error', fail)
      request.end(payload)
    })
  }

  async expect(call: Call, status: number): Promise<string> {
    const answer = await this.send(call)
    if (answer.status !== status) throw new Error(`${call.method} ${call.path}: expected ${status}, got ${answer.status}: ${answer.body.slice(0, 400)}`)
    return answer.body
  }

  close(): void {
    this.agent.destroy()
  }
}

// ---------------------------------------------------------------------------------------------
// Measuring.

interface Result {
  operation: string
  n: number
  p50: number
  p99: number
  max: number
  /** Store lookups per timed sample: answered by Redis, by Postgres. */
  redisPerSample: number
  postgresPerSample: number
}

/** The counter values of tgw_store_lookups_total in this process's gateway. */
async function lookupCounts(metrics: Metrics): Promise<{ redis: number; postgres: number }> {
  const metric = metrics.registry.getSingleMetric('tgw_store_lookups_total') as unknown as {
    get(): Promise<{ values: { labels: { tier?: string }; value: number }[] }>
  }
  const { values } = await metric.get()
  const of = (tier: string) => values.find((v) => v.labels.tier === tier)?.value ?? 0
  return { redis: of('redis'), postgres: of('postgres') }
}

interface Op {
  name: string
  /** Timed samples (default N), after WARMUP untimed ones. */
  count?: number
  /** Prepares sample i (untimed: the cache state, a warming request) and returns its timed part. */
  sample: (i: number) => Promise<() => Promise<unknown>>
}

/**
 * Round i runs sample i of every operation that still has samples to take, so that the noise of
 * this shared machine is spread over all operations alike instead of landing on one of them.
 */
async function measureInTurn(ops: Op[], metrics: Metrics): Promise<Result[]> {
  const latencies = ops.map(() => [] as number[])
  const redis = ops.map(() => 0)
  const pg = ops.map(() => 0)
  const rounds = WARMUP + Math.max(...ops.map((op) => op.count ?? N))
  const started = performance.now()
  for (let i = 0; i < rounds; i++) {
    for (const [k, op] of ops.entries()) {
      if (i >= WARMUP + (op.count ?? N)) continue
      checkInterrupted()
      const timed = await op.sample(i)
      const before = await lookupCounts(metrics)
      const t0 = performance.now()
      await timed()
      const elapsed = performance.now() - t0
      if (i < WARMUP) continue
      const after = await lookupCounts(metrics)
      redis[k]! += after.redis - before.redis
      pg[k]! += after.postgres - before.postgres
      latencies[k]!.push(elapsed)
    }
    if ((i + 1) % 500 === 0) log(`    round ${i + 1} / ${rounds} (${((performance.now() - started) / 1000).toFixed(0)} s)`)
  }
  return ops.map((op, k) => {
    const sorted = latencies[k]!.sort((a, b) => a - b)
    const n = sorted.length
    const result: Result = {
      operation: op.name,
      n,
      p50: percentile(sorted, 0.5),
      p99: percentile(sorted, 0.99),
      max: sorted[n - 1]!,
      redisPerSample: redis[k]! / n,
      postgresPerSample: pg[k]! / n,
    }
    log(`    ${op.name}: p50 ${result.p50.toFixed(3)} ms, p99 ${result.p99.toFixed(3)} ms (lookups/sample: Redis ${result.redisPerSample.toFixed(2)}, Postgres ${result.postgresPerSample.toFixed(2)})`)
    return result
  })
}

type UsageWalk = NonNullable<ScaleRun['usageWalk']>

/** Walks the whole usage report by next_cursor, 100 a page, again until 1,000 pages were timed (or 2 min). */
async function walkUsage(c: Client, auth: Record<string, string>, usagePath: (cursor: string | null, limit: number) => string, expected: number): Promise<UsageWalk> {
  const pageTimes: number[] = []
  const byPosition: number[][] = [[], [], []]
  const pagesPerWalk = Math.ceil(expected / 100)
  const tenth = Math.max(1, Math.floor(pagesPerWalk / 10))
  let walks = 0
  let firstWalkMs = 0
  const started = performance.now()
  do {
    let cursor: string | null = null
    let page = 0
    let entries = 0
    const t0 = performance.now()
    do {
      checkInterrupted()
      const t1 = performance.now()
      const body = await c.expect({ method: 'GET', path: usagePath(cursor, 100), headers: auth }, 200)
      const elapsed = performance.now() - t1
      const parsed = JSON.parse(body) as { data: { days: unknown[] }[]; next_cursor: string | null }
      entries += parsed.data.length
      if (parsed.data.length > 0 && parsed.data[0]!.days.length !== USAGE_DAYS) throw new Error(`usage entry with ${parsed.data[0]!.days.length} days`)
      cursor = parsed.next_cursor
      pageTimes.push(elapsed)
      if (page < tenth) byPosition[0]!.push(elapsed)
      if (Math.abs(page - Math.floor(pagesPerWalk / 2)) < Math.max(1, tenth / 2)) byPosition[1]!.push(elapsed)
      if (page >= pagesPerWalk - tenth) byPosition[2]!.push(elapsed)
      page++
    } while (cursor !== null)
    if (entries !== expected) throw new Error(`the usage walk listed ${entries} sub-accounts, expected ${expected}`)
    if (walks === 0) firstWalkMs = performance.now() - t0
    walks++
  } while (pageTimes.length < 1000 && performance.now() - started < 120_000)
  const sorted = [...pageTimes].sort((a, b) => a - b)
  const walk: UsageWalk = {
    pages: pageTimes.length,
    walks,
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
    max: sorted[sorted.length - 1]!,
    totalMs: firstWalkMs,
    firstTenth: median(byPosition[0]!),
    middleTenth: median(byPosition[1]!),
    lastTenth: median(byPosition[2]!),
  }
  log(`    usage walk: ${expected} sub-accounts, one walk ${(firstWalkMs / 1000).toFixed(1)} s; page p50 ${walk.p50.toFixed(1)} ms, p99 ${walk.p99.toFixed(1)} ms`)
  return walk
}

/** A permutation of 0..size-1, walked by a stride coprime to size, so neighbours are far apart. */
function spread(size: number): (i: number) => number {
  const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b))
  let stride = Math.max(1, Math.floor(size * 0.618))
  while (gcd(stride, size) !== 1) stride++
  return (i) => (i * stride) % size
}

// ---------------------------------------------------------------------------------------------
// EXPLAIN of the SQL the store functions send.

interface Captured {
  query: string
  params: unknown[]
}

function literal(value: unknown): string {
  if (value === null || value === undefined) return 'null'
  if (Buffer.isBuffer(value)) return `'\\x${value.toString('hex')}'::bytea`
  if (typeof value === 'number' || typeof value === 'bigint') return String(value)
  if (value instanceof Date) return `'${value.toISOString()}'`
  if (Array.isArray(value)) return `array[${value.map(literal).join(', ')}]`
  if (typeof value === 'object') return `'${JSON.stringify(value).replaceAll("'", "''")}'`
  return `'${String(value).replaceAll("'", "''")}'`
}

/**
 * Runs `run` with a connection that records the statements it sends, then shows EXPLAIN
 * (ANALYZE, BUFFERS) of the last one with its parameters (the custom plan Postgres makes for
 * these values), and of its generic plan (what a prepared statement may switch to after five
 * executions; postgres.js prepares every statement), on a connection with the gateway's session
 * settings. Writes are explained in a transaction that is rolled back.
 */
async function explain(url: string, title: string, run: (sql: postgres.Sql) => Promise<unknown>, write = false): Promise<string> {
  const captured: Captured[] = []
  const capturing = postgres(url, { max: 1, onnotice: () => {}, debug: (_c, query, params) => captured.push({ query, params }) })
  try {
    if (write) {
      await capturing.begin(async (tx) => {
        await run(tx as unknown as postgres.Sql)
        throw new Rollback()
      }).catch((err) => {
        if (!(err instanceof Rollback)) throw err
      })
    } else {
      await run(capturing)
    }
  } finally {
    await capturing.end()
  }
  const statement = captured.filter((c) => !/^(begin|commit|rollback)/i.test(c.query.trim())).at(-1)
  if (statement === undefined) throw new Error(`${title}: no statement captured`)
  // Explained on a connection the gateway's own openStore() opens, so with its session settings.
  const store = await openStore({ databaseUrl: url, dataDir: '/nonexistent', maxConnections: 1 })
  // postgres.js 3.4.9 never hands a new connection to reserve() when fetch_types is off (the
  // gateway's setting, src/store/db.ts): open it with a query first.
  await store.sql`select 1`
  const reserved = await store.sql.reserve()
  try {
    const values = statement.params.map(literal)
    const inlined = statement.query.replace(/\$(\d+)/g, (_m, n: string) => values[Number(n) - 1]!)
    const plan = async (prefix: string): Promise<string> => {
      await reserved.unsafe('begin')
      try {
        const rows = await reserved.unsafe<{ 'QUERY PLAN': string }[]>(`${prefix} ${inlined}`)
        return rows.map((r) => r['QUERY PLAN']).join('\n')
      } finally {
        await reserved.unsafe('rollback')
      }
    }
    const custom = await plan('explain (analyze, buffers)')
    // The generic plan: prepared with parameters, forced generic, executed with these values.
    await reserved.unsafe(`prepare scale_bench_stmt as ${statement.query}`)
    await reserved.unsafe('set plan_cache_mode = force_generic_plan')
    await reserved.unsafe('begin')
    let generic: string
    try {
      const rows = await reserved.unsafe<{ 'QUERY PLAN': string }[]>(`explain (analyze, buffers) execute scale_bench_stmt (${values.join(', ')})`)
      generic = rows.map((r) => r['QUERY PLAN']).join('\n')
    } finally {
      await reserved.unsafe('rollback')
      await reserved.unsafe('deallocate scale_bench_stmt')
      await reserved.unsafe('reset plan_cache_mode')
    }
    const shape = (text: string) => text.replace(/\(cost=[^)]*\)|\(actual[^)]*\)|Buffers:.*|Planning.*|Execution.*|\$\d+|'[^']*'(::\w+)?|\d+(\.\d+)?/g, '').replace(/\s+/g, ' ')
    const sameShape = shape(custom) === shape(generic)
    return [
      `### ${title}`,
      '',
      'SQL (as sent by src/store, $n = parameters):',
      statement.query.replace(/\s+/g, ' ').trim(),
      `parameters: ${values.join(', ')}`,
      '',
      'EXPLAIN (ANALYZE, BUFFERS), custom plan for these values:',
      custom,
      '',
      sameShape ? 'generic plan (plan_cache_mode = force_generic_plan): same shape' : 'generic plan (plan_cache_mode = force_generic_plan): DIFFERENT',
      ...(sameShape ? [] : [generic]),
      '',
    ].join('\n')
  } finally {
    reserved.release()
    await store.close()
  }
}

class Rollback extends Error {}

// ---------------------------------------------------------------------------------------------
// One scale.

interface ScaleRun {
  scale: number
  seeded: Seeded
  results: Result[]
  usageWalk: null | { pages: number; walks: number; p50: number; p99: number; max: number; totalMs: number; firstTenth: number; middleTenth: number; lastTenth: number }
  explains: string[]
  sizes: Record<string, string>
}

async function withDatabase<T>(scale: number, use: (url: string, dbName: string) => Promise<T>): Promise<T> {
  const dbName = `tgw_scale_${RUN}_${scale}`
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} })
  const url = new URL(ADMIN_URL)
  url.pathname = `/${dbName}`
  let created = false
  try {
    await admin.unsafe(`create database ${dbName}`)
    created = true
    return await use(url.toString(), dbName)
  } finally {
    if (created && !KEEP) {
      await admin.unsafe(`drop database if exists ${dbName} with (force)`).catch((err) => log(`dropping ${dbName} failed; drop it by hand: ${err}`))
    } else if (created) {
      log(`kept database ${dbName} (BENCH_KEEP=1)`)
    }
    await admin.end({ timeout: 5 })
  }
}

async function deleteRedisPrefix(redis: Redis, prefix: string): Promise<number> {
  let cursor = '0'
  let deleted = 0
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000)
    cursor = next
    if (keys.length > 0) deleted += await redis.unlink(...keys)
  } while (cursor !== '0')
  return deleted
}

/** Sub-account i's list position (0-based) → the cursor that starts the page after it. */
async function cursorAfter(sql: postgres.Sql, parentId: string, offset: number, withUsage: { from: string; to: string } | null): Promise<string> {
  const [row] = withUsage === null
    ? await sql<{ seq: string }[]>`
        select seq::text from tenants where parent_id = ${parentId} order by tenants.seq offset ${offset} limit 1`
    : await sql<{ seq: string }[]>`
        select t.seq::text from tenants t where t.parent_id = ${parentId}
          and exists (select 1 from usage_daily u where u.tenant_id = t.id and u.day between ${withUsage.from} and ${withUsage.to})
        order by t.seq offset ${offset} limit 1`
  if (row === undefined) throw new Error(`no row at offset ${offset}`)
  return encodeCursor(row.seq)
}

async function runScale(scale: number, redis: Redis, upstreamUrl: string, atLargest: (url: string, seeded: Seeded) => Promise<void>): Promise<ScaleRun> {
  return withDatabase(scale, async (url, dbName) => {
    log(`\n== ${scale.toLocaleString('en-US')} sub-accounts (${dbName}) ==`)
    const seedSql = postgres(url, { max: 2, onnotice: () => {} })
    let seeded: Seeded
    try {
      seeded = await seed(seedSql, { seed: dbName, subAccounts: scale, keysPerSub: KEYS_PER_SUB, usageDays: USAGE_DAYS })
      if (SEED_SQL !== '') {
        await seedSql.unsafe(SEED_SQL)
        await seedSql.unsafe('analyze')
        log(`  what-if: ${SEED_SQL}`)
      }
      for (const { name, value } of ALTER_DATABASE) {
        await seedSql.unsafe(`alter database ${dbName} set ${name} = '${value.replaceAll("'", "''")}'`)
        log(`  what-if: alter database … set ${name} = '${value}'`)
      }
    } finally {
      await seedSql.end()
    }
    const { parentId, parentKey } = seeded
    if (SKIP_LATENCY) {
      await atLargest(url, seeded)
      return { scale, seeded, results: [], usageWalk: null, explains: [], sizes: {} }
    }
    const totalKeys = scale * KEYS_PER_SUB
    const today = utcDay(Date.now())
    const from = utcDay(Date.now() - (USAGE_DAYS - 1) * 86_400_000)
    const range = { from, to: today }
    // 30 days a year before the seeded usage: a range in which no sub-account has usage.
    const emptyRange = { from: utcDay(Date.now() - 400 * 86_400_000), to: utcDay(Date.now() - 371 * 86_400_000) }

    // Positions for the list pages, from a plain connection.
    const probe = postgres(url, { max: 1, onnotice: () => {} })
    let cursors: { listMiddle: string; listLast: string; usageMiddle: string; usageLast: string; usageCount: number }
    let sizes: Record<string, string> = {}
    try {
      const [usage] = await probe<{ n: number }[]>`
        select count(*)::int as n from tenants t where t.parent_id = ${parentId}
          and exists (select 1 from usage_daily u where u.tenant_id = t.id and u.day between ${from} and ${today})`
      const usageCount = usage!.n
      cursors = {
        listMiddle: await cursorAfter(probe, parentId, Math.floor(scale / 2) - 1, null),
        listLast: await cursorAfter(probe, parentId, scale - 21, null),
        usageMiddle: await cursorAfter(probe, parentId, Math.floor(usageCount / 2) - 1, range),
        usageLast: await cursorAfter(probe, parentId, usageCount - 21, range),
        usageCount,
      }
      const rows = await probe<{ name: string; size: string }[]>`
        select c.relname as name, pg_size_pretty(pg_total_relation_size(c.oid)) as size from pg_class c
        where c.relname in ('tenants', 'api_keys', 'usage_daily')`
      sizes = Object.fromEntries(rows.map((r) => [r.name, r.size]))
    } finally {
      await probe.end()
    }

    // EXPLAIN of each query, against the freshly seeded data.
    log('  explain…')
    const mid = Math.floor(scale / 2)
    const someDigest = keyDigest(keyFor(dbName, Math.floor(totalKeys / 3)))
    const explains: string[] = []
    const lastSeq = (cursor: string) => Buffer.from(cursor, 'base64url').toString().slice(2)
    const queries: [string, (sql: postgres.Sql) => Promise<unknown>, boolean?][] = [
      ['get: getSubAccount (GET /v1/sub-accounts/{id})', (sql) => getSubAccount(sql, parentId, subIdOf(dbName, mid))],
      ['list, first page: listSubAccounts limit 20', (sql) => listSubAccounts(sql, parentId, { limit: 21, afterSeq: null, status: null, externalId: null })],
      ['list, middle page (cursor)', (sql) => listSubAccounts(sql, parentId, { limit: 21, afterSeq: lastSeq(cursors.listMiddle), status: null, externalId: null })],
      ['list, last page (cursor)', (sql) => listSubAccounts(sql, parentId, { limit: 21, afterSeq: lastSeq(cursors.listLast), status: null, externalId: null })],
      ['list, middle page, status=active', (sql) => listSubAccounts(sql, parentId, { limit: 21, afterSeq: lastSeq(cursors.listMiddle), status: 'active', externalId: null })],
      ['list, middle page, status=deactivated (1 % of rows)', (sql) => listSubAccounts(sql, parentId, { limit: 21, afterSeq: lastSeq(cursors.listMiddle), status: 'deactivated', externalId: null })],
      ['list, external_id filter', (sql) => listSubAccounts(sql, parentId, { limit: 21, afterSeq: null, status: null, externalId: extIdOf(mid) })],
      ['list keys of a sub-account: listKeys', (sql) => listKeys(sql, subIdOf(dbName, mid), { limit: 21, afterSeq: null })],
      ['usage report, first page (limit 20, 30 days): usageRows', (sql) => usageRows(sql, parentId, { ...range, afterSeq: null, limit: 21 })],
      ['usage report, middle page', (sql) => usageRows(sql, parentId, { ...range, afterSeq: lastSeq(cursors.usageMiddle), limit: 21 })],
      ['usage report, last page', (sql) => usageRows(sql, parentId, { ...range, afterSeq: lastSeq(cursors.usageLast), limit: 21 })],
      ['usage report, middle page, limit 100 (the walk)', (sql) => usageRows(sql, parentId, { ...range, afterSeq: lastSeq(cursors.usageMiddle), limit: 101 })],
      ['usage report, a month without usage (first page)', (sql) => usageRows(sql, parentId, { ...emptyRange, afterSeq: null, limit: 21 })],
      ['key by digest: findKeyByDigest (authentication, cache miss)', (sql) => findKeyByDigest(sql, someDigest)],
      ['tenant by id: getTenant (authentication and acting, cache miss)', (sql) => getTenant(sql, subIdOf(dbName, mid))],
      ['ext lookup: findSubAccountIdByExternalId (acting by ext:, cache miss)', (sql) => findSubAccountIdByExternalId(sql, parentId, extIdOf(mid))],
      ['any active: hasActiveSubAccounts (a write without the acting header, cache miss)', (sql) => hasActiveSubAccounts(sql, parentId)],
      ['create: createSubAccount (rolled back)', (sql) => createSubAccount(sql, parentId, { name: 'explain', externalId: 'explain-ext', metadata: {} }), true],
      ['deactivate: setSubAccountStatus (rolled back)', (sql) => setSubAccountStatus(sql, parentId, subIdOf(dbName, mid), 'deactivated'), true],
    ]
    for (const [title, run, write] of queries) {
      checkInterrupted()
      explains.push(await explain(url, `${title} — ${scale.toLocaleString('en-US')} sub-accounts`, run, write ?? false))
    }

    // The gateway, in this process.
    const prefix = `tgwscale:${RUN}:${scale}:`
    const metrics = createMetrics()
    let store: Store | null = null
    let app: FastifyInstance | null = null
    let client: Client | null = null
    const results: Result[] = []
    let usageWalk: UsageWalk
    try {
      store = await openStore({ databaseUrl: url, dataDir: '/nonexistent' })
      const config = loadConfig(
        { DATABASE_URL: url, REDIS_URL, REDIS_KEY_PREFIX: prefix, UPSTREAM_URL: upstreamUrl, GATEWAY_CONFIG: resolve(ROOT, 'config/gateway.yaml') },
        ROOT,
      )
      app = await buildApp({ config, store, metrics, redisKeyPrefix: prefix })
      await app.listen({ host: '127.0.0.1', port: 0 })
      const gateway = app
      client = new Client((app.server.address() as AddressInfo).port)
      const c = client
      // Redis connected and Postgres answering.
      for (let tries = 0; ; tries++) {
        const ready = await c.send({ method: 'GET', path: '/readyz' })
        if (ready.status === 200) break
        if (tries > 100) throw new Error(`/readyz: ${ready.status} ${ready.body}`)
        await sleep(100)
      }
      const cache = gateway.tenancyCache
      // clearLocal() distrusts entries stored up to its millisecond (storedAt > trustedFrom):
      // wait for the next one, so that what a sample stores right after is trusted.
      const clearLocal = () => {
        cache.clearLocal()
        const at = Date.now()
        while (Date.now() === at) {
          // spin, under a millisecond
        }
      }
      const auth = { authorization: `Bearer ${parentKey}` }
      const writeHeaders = { ...auth, 'x-service-acting-tenant': 'self' }
      const parentDigest = keyDigest(parentKey)
      const redisKey = (name: string) => prefix + name
      const request = (call: Call, status: number) => async () => c.expect(call, status)
      const randomSub = () => Math.floor(Math.random() * scale)
      const randomActiveSub = () => {
        for (;;) {
          const i = randomSub()
          if (!isSeededDeactivated(i)) return i
        }
      }

      // Content checks, once, outside the timed loops.
      const one = JSON.parse(await c.expect({ method: 'GET', path: `/v1/sub-accounts/${subIdOf(dbName, 3)}`, headers: auth }, 200)) as { external_id: string }
      if (one.external_id !== extIdOf(3)) throw new Error(`GET sub-account 3 answered external_id ${one.external_id}`)
      const lastPage = JSON.parse(await c.expect({ method: 'GET', path: `/v1/sub-accounts?limit=20&cursor=${cursors.listLast}`, headers: auth }, 200)) as {
        data: { external_id: string }[]
        next_cursor: string | null
      }
      if (lastPage.data.length !== 20 || lastPage.next_cursor !== null || lastPage.data[19]!.external_id !== extIdOf(scale - 1)) {
        throw new Error(`the last list page is not the last 20 sub-accounts: ${JSON.stringify(lastPage).slice(0, 300)}`)
      }
      const middlePage = JSON.parse(await c.expect({ method: 'GET', path: `/v1/sub-accounts?limit=20&cursor=${cursors.listMiddle}`, headers: auth }, 200)) as {
        data: { external_id: string }[]
      }
      if (middlePage.data[0]?.external_id !== extIdOf(Math.floor(scale / 2))) throw new Error('the middle list page does not start at the middle')
      const actingCheck = await c.send({ method: 'GET', path: '/v1/things/echo', headers: { ...auth, 'x-service-acting-tenant': `ext:${extIdOf(5)}` } })
      const echoed = JSON.parse(actingCheck.body) as Record<string, string>
      if (actingCheck.status !== 200 || echoed['x-service-resolved-tenant'] !== subIdOf(dbName, 5)) {
        throw new Error(`acting as ext:${extIdOf(5)} did not reach the upstream as that sub-account: ${actingCheck.status} ${actingCheck.body.slice(0, 300)}`)
      }

      // The whole usage report first (acting requests below add usage for today), 100
      // sub-accounts a page, walked by next_cursor; walked again until 1,000 pages were timed.
      const usagePath = (cursor: string | null, limit: number) =>
        `/v1/sub-accounts/usage?from=${from}&to=${today}&limit=${limit}${cursor === null ? '' : `&cursor=${cursor}`}`
      log('  walking the usage report, 100 per page…')
      usageWalk = await walkUsage(c, auth, usagePath, cursors.usageCount)

      // Then every operation in turn, sample by sample, so that a noisy minute of this shared
      // machine lands on all of them alike. Each sample prepares the cache state it needs.
      const lookups = cache.lookups
      const warmParent = async () => {
        // A sample before may have left the in-process cache untrusted: the parent's key and
        // account back in it (from Redis), so that a "warm" request finds them locally.
        await lookups.keyByDigest(parentDigest)
        await lookups.tenant(parentId)
      }
      const warm = (call: () => Call, status = 200) => async () => {
        await warmParent()
        return request(call(), status)
      }
      const acting = (i: number, by: 'uuid' | 'ext'): Call => ({
        method: 'GET',
        path: PROXIED_PATH,
        headers: { ...auth, 'x-service-acting-tenant': by === 'uuid' ? subIdOf(dbName, i) : `ext:${extIdOf(i)}` },
      })
      const entriesOf = (i: number, by: 'uuid' | 'ext') => [
        redisKey(cacheKeys.key(parentDigest)),
        redisKey(cacheKeys.tenant(parentId)),
        redisKey(cacheKeys.tenant(subIdOf(dbName, i))),
        ...(by === 'ext' ? [redisKey(cacheKeys.externalId(parentId, extIdOf(i)))] : []),
      ]
      // Keys never used before, in four disjoint quarters of the seeded keys (one per operation).
      const quarter = Math.floor(totalKeys / 4)
      const walk = spread(quarter)
      const keyOf = (part: number, i: number) => part * quarter + walk(i % quarter)
      if (WARMUP + N > quarter) log(`  note: ${WARMUP + N} samples > ${quarter} keys a quarter: some "never-seen" keys repeat`)
      const found = async (digest: Buffer) => {
        if ((await lookups.keyByDigest(digest)) === null) throw new Error('a seeded key was not found')
      }
      const usageSamples = Math.max(100, Math.floor(N / 4))
      const created: string[] = []

      const ops: Op[] = [
        { name: 'baseline: GET /healthz', sample: async () => request({ method: 'GET', path: '/healthz' }, 200) },
        { name: 'get', sample: warm(() => ({ method: 'GET', path: `/v1/sub-accounts/${subIdOf(dbName, randomSub())}`, headers: auth })) },
        { name: 'list, first page', sample: warm(() => ({ method: 'GET', path: '/v1/sub-accounts?limit=20', headers: auth })) },
        { name: 'list, middle page', sample: warm(() => ({ method: 'GET', path: `/v1/sub-accounts?limit=20&cursor=${cursors.listMiddle}`, headers: auth })) },
        { name: 'list, last page', sample: warm(() => ({ method: 'GET', path: `/v1/sub-accounts?limit=20&cursor=${cursors.listLast}`, headers: auth })) },
        {
          name: 'list, middle page, status=active',
          sample: warm(() => ({ method: 'GET', path: `/v1/sub-accounts?limit=20&status=active&cursor=${cursors.listMiddle}`, headers: auth })),
        },
        {
          name: 'list, middle page, status=deactivated (1 %)',
          sample: warm(() => ({ method: 'GET', path: `/v1/sub-accounts?limit=20&status=deactivated&cursor=${cursors.listMiddle}`, headers: auth })),
        },
        { name: 'list keys of a sub-account', sample: warm(() => ({ method: 'GET', path: `/v1/sub-accounts/${subIdOf(dbName, randomSub())}/api-keys`, headers: auth })) },
        { name: 'usage (30 days, 20/page), first page', count: usageSamples, sample: warm(() => ({ method: 'GET', path: usagePath(null, 20), headers: auth })) },
        { name: 'usage (30 days, 20/page), middle page', count: usageSamples, sample: warm(() => ({ method: 'GET', path: usagePath(cursors.usageMiddle, 20), headers: auth })) },
        { name: 'usage (30 days, 20/page), last page', count: usageSamples, sample: warm(() => ({ method: 'GET', path: usagePath(cursors.usageLast, 20), headers: auth })) },
        {
          name: 'usage, a month without usage (first page)',
          count: usageSamples,
          sample: warm(() => ({ method: 'GET', path: `/v1/sub-accounts/usage?from=${emptyRange.from}&to=${emptyRange.to}`, headers: auth })),
        },
        ...(['uuid', 'ext'] as const).flatMap((by): Op[] => {
          const label = by === 'uuid' ? 'UUID' : 'ext:'
          return [
            {
              name: `act by ${label}: all in-process (warm)`,
              sample: async () => {
                const i = randomActiveSub()
                await c.expect(acting(i, by), 200)
                return request(acting(i, by), 200)
              },
            },
            {
              name: `act by ${label}: in-process cold, Redis serves`,
              sample: async () => {
                const i = randomActiveSub()
                // Through Redis (or Postgres, when an entry's 60 s in Redis ran out) into both tiers.
                clearLocal()
                await c.expect(acting(i, by), 200)
                clearLocal()
                return request(acting(i, by), 200)
              },
            },
            {
              name: `act by ${label}: in-process and Redis cold, Postgres serves`,
              sample: async () => {
                const i = randomActiveSub()
                clearLocal()
                await redis.del(...entriesOf(i, by))
                return request(acting(i, by), 200)
              },
            },
          ]
        }),
        {
          name: 'never-seen valid key (sub-account key; key and tenant from Postgres)',
          sample: async (i) => {
            const n = keyOf(0, i)
            const sub = Math.floor(n / KEYS_PER_SUB)
            clearLocal()
            await redis.del(redisKey(cacheKeys.key(keyDigest(keyFor(dbName, n)))), redisKey(cacheKeys.tenant(subIdOf(dbName, sub))))
            return request({ method: 'GET', path: PROXIED_PATH, headers: { authorization: `Bearer ${keyFor(dbName, n)}` } }, isSeededDeactivated(sub) ? 403 : 200)
          },
        },
        {
          name: 'lookup alone: keyByDigest, Redis serves',
          sample: async (i) => {
            const digest = keyDigest(keyFor(dbName, keyOf(1, i)))
            await found(digest) // into Redis (from Postgres) and the in-process cache
            clearLocal()
            return () => found(digest)
          },
        },
        {
          name: 'lookup alone: keyByDigest, never seen (Redis miss, then Postgres)',
          sample: async (i) => {
            const digest = keyDigest(keyFor(dbName, keyOf(2, i)))
            await redis.del(redisKey(cacheKeys.key(digest)))
            clearLocal()
            return () => found(digest)
          },
        },
        {
          name: 'lookup alone: findKeyByDigest SQL on the pool (no cache)',
          sample: async (i) => {
            const digest = keyDigest(keyFor(dbName, keyOf(3, i)))
            return async () => {
              if ((await findKeyByDigest(store!.sql, digest)) === null) throw new Error('a seeded key was not found')
            }
          },
        },
        {
          name: 'reference: one Redis MGET of two keys (bench client)',
          sample: async (i) => {
            const name = redisKey(cacheKeys.key(keyDigest(keyFor(dbName, keyOf(1, i)))))
            return () => redis.mget(name, `${name}:gen`)
          },
        },
        {
          // DESIGN §4: a parent's write without the header is refused while it has an active
          // sub-account; whether it has one is a cached lookup, here answered by Postgres.
          name: 'write without acting header, any-active from Postgres (400)',
          sample: async () => {
            await warmParent()
            await redis.del(redisKey(cacheKeys.anyActive(parentId)))
            clearLocal()
            await warmParent()
            return request({ method: 'POST', path: PROXIED_PATH, headers: auth }, 400)
          },
        },
        {
          name: 'create',
          sample: async (i) => {
            await warmParent()
            return async () => {
              const body = await c.expect({ method: 'POST', path: '/v1/sub-accounts', headers: writeHeaders, body: { name: `created ${i}`, external_id: `new-${i}` } }, 201)
              created.push((JSON.parse(body) as { id: string }).id)
            }
          },
        },
        // The sub-account the create of this round made.
        { name: 'deactivate', sample: async (i) => warm(() => ({ method: 'POST', path: `/v1/sub-accounts/${created[i]}/deactivate`, headers: writeHeaders }))() },
      ]

      // Untimed: JIT, the pools' connections, plan caches (a prepared statement changes plan after five runs).
      log('  warming up…')
      for (let i = 0; i < 300; i++) {
        await c.expect(acting(randomActiveSub(), i % 2 === 0 ? 'uuid' : 'ext'), 200)
        await c.expect({ method: 'GET', path: `/v1/sub-accounts/${subIdOf(dbName, randomSub())}`, headers: auth }, 200)
      }
      log(`  measuring ${ops.length} operations in turn, ${N} samples each (+${WARMUP} warm-up)…`)
      results.push(...(await measureInTurn(ops, metrics)))
    } finally {
      client?.close()
      await app?.close().catch((err) => log(`closing the gateway: ${err}`))
      await store?.close().catch((err) => log(`closing the pool: ${err}`))
      const deleted = await deleteRedisPrefix(redis, prefix).catch(() => -1)
      log(`  deleted ${deleted} Redis keys under ${prefix}`)
    }
    if (scale === Math.max(...SCALES)) await atLargest(url, seeded)
    return { scale, seeded, results, usageWalk: usageWalk!, explains, sizes }
  })
}

// ---------------------------------------------------------------------------------------------
// The gateway as its own process (proxy ratio, memory).

interface GatewayProcess {
  child: ChildProcess
  base: string
  metricsPort: number
  prefix: string
  output: () => string
}

/** Stops a gateway process and deletes the Redis entries under its prefix. */
async function stopGateway(gateway: GatewayProcess): Promise<void> {
  await stopChild(gateway.child, 15_000)
  const redis = new Redis(REDIS_URL)
  await deleteRedisPrefix(redis, gateway.prefix).catch(() => 0)
  redis.disconnect()
}

let distDir: string | null = null

async function startGateway(url: string, upstreamUrl: string, label: string, runtime: GatewayRuntime): Promise<GatewayProcess> {
  const [port, metricsPort] = (await freePorts(2)) as [number, number]
  const prefix = `tgwscale:${RUN}:${label}:`
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOST: '127.0.0.1',
    PORT: String(port),
    METRICS_PORT: String(metricsPort),
    DATABASE_URL: url,
    REDIS_URL,
    REDIS_KEY_PREFIX: prefix,
    UPSTREAM_URL: upstreamUrl,
    LOG_LEVEL: 'warn',
    GATEWAY_CONFIG: resolve(ROOT, 'config/gateway.yaml'),
  }
  if (runtime === 'dist' && distDir === null) {
    log('  compiling the gateway…')
    distDir = GATEWAY_DIST ?? buildDist(ROOT, `scale-${RUN}`)
  }
  const args = gatewayArgs(runtime, ROOT, distDir, GATEWAY_NODE_ARGS)
  const child = spawn(processNode().path, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] })
  children.push(child)
  const output = captureOutput(child)
  const base = `http://127.0.0.1:${port}`
  await waitForGateway(base, child, output, checkInterrupted)
  return { child, base, metricsPort, prefix, output }
}

function rssBytes(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN
  try {
    const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
    return match ? Number(match[1]) * 1024 : Number.NaN
  } catch {
    return Number.NaN
  }
}

/** Selected series of the gateway's /metrics, summed over their labels. */
async function scrape(metricsPort: number, names: readonly string[]): Promise<Record<string, number>> {
  const out: Record<string, number> = {}
  try {
    const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`, { signal: AbortSignal.timeout(3000) })).text()
    for (const line of text.split('\n')) {
      const match = /^(\w+)(\{([^}]*)\})?\s+(\S+)/.exec(line)
      if (match === null) continue
      const key = names.find((n) => n === match[1] || n === `${match[1]}{${match[3]}}`)
      if (key !== undefined) out[key] = (out[key] ?? 0) + Number(match[4])
    }
    // A labelled counter has no series before its first increment.
    for (const name of names) if (out[name] === undefined && name.startsWith('tgw_') && text.includes(`# TYPE ${name.split('{')[0]} counter`)) out[name] = 0
  } catch {
    // A missed scrape leaves the figures out of this sample.
  }
  return out
}

// autocannon ships no types; the part used here.
interface AutocannonResult {
  duration: number
  errors: number
  timeouts: number
  mismatches: number
  non2xx: number
  statusCodeStats: Record<string, { count: number }>
  requests: { total: number }
}
interface AutocannonInstance {
  on(event: 'response', listener: (client: unknown, status: number, bytes: number, ms: number) => void): void
  stop(): void
}
type Autocannon = (opts: Record<string, unknown>, cb: (err: Error | null, result: AutocannonResult) => void) => AutocannonInstance
const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon

function runAutocannon(opts: Record<string, unknown>, onResponse?: (ms: number) => void): Promise<AutocannonResult> {
  return new Promise((done, fail) => {
    const instance = autocannon(opts, (err, result) => {
      running = null
      if (err) fail(err)
      else done(result)
    })
    running = instance
    if (onResponse) instance.on('response', (_c, _s, _b, ms) => onResponse(ms))
  })
}

function failedRequests(result: AutocannonResult): string | null {
  if (result.non2xx === 0 && result.errors === 0 && result.timeouts === 0 && result.mismatches === 0) return null
  const codes = Object.entries(result.statusCodeStats).map(([code, { count }]) => `${code}×${count}`).join(', ')
  return `${result.non2xx} non-2xx (${codes}), ${result.errors} errors, ${result.timeouts} timeouts, ${result.mismatches} mismatches`
}

type ProxySide = 'bare' | 'gateway' | 'gateway, spread'

interface ProxyRound {
  side: ProxySide
  round: string
  requests: number
  perSecond: number
  p50: number
  p99: number
  cpuMicros: number
}

interface ProxyRun {
  rounds: ProxyRound[]
  medians: ProxyRound[]
  lookups: Record<string, string>
}

/**
 * bench/proxy.ts's comparison, on the seeded database: the parent acting as ext:<one seeded
 * sub-account>, as there; and, as a third side, acting as every active sub-account in turn (by
 * ext:), so that the in-process cache holds a working set of the data's size.
 */
async function proxyRatio(url: string, seeded: Seeded, upstreamUrl: string): Promise<ProxyRun> {
  log(`\n  proxy ratio: ${PROXY_ROUNDS} × ${PROXY_DURATION} s per side, ${PROXY_CONNECTIONS} connections…`)
  // With the gateway's V8 flags, as bench/proxy.ts runs it.
  const bare = await forkChild(PROXY_SCRIPT, 'bare proxy', ['bare', upstreamUrl], { nodeArgs: imageNodeFlags(ROOT), node: processNode().path })
  let gateway: GatewayProcess | null = null
  try {
    gateway = await startGateway(url, upstreamUrl, 'proxy', 'dist')
    const auth = { authorization: `Bearer ${seeded.parentKey}` }
    const active = Array.from({ length: seeded.subAccounts }, (_, i) => i).filter((i) => !isSeededDeactivated(i))
    let next = 0
    interface Side {
      name: ProxySide
      url: string
      pid: number | undefined
      headers: Record<string, string>
      /** Per-request headers (autocannon's setupRequest), else the fixed `headers`. */
      rotate?: () => string
    }
    const gatewayHeaders = { ...auth, 'x-service-acting-tenant': `ext:${extIdOf(1)}` }
    const sides: Side[] = [
      { name: 'bare', url: `http://127.0.0.1:${bare.port}`, headers: bareHeaders(gatewayHeaders), pid: bare.child.pid },
      { name: 'gateway', url: gateway.base, pid: gateway.child.pid, headers: gatewayHeaders },
      {
        name: 'gateway, spread',
        url: gateway.base,
        pid: gateway.child.pid,
        headers: auth,
        rotate: () => `ext:${extIdOf(active[next++ % active.length]!)}`,
      },
    ]
    const load = async (side: Side, seconds: number, round: string): Promise<ProxyRound> => {
      checkInterrupted()
      const latencies: number[] = []
      const cpuBefore = cpuSeconds(side.pid)
      const rotate = side.rotate
      // autocannon takes expectBody or a request list, not both: with a list, bodies are checked here.
      let wrongBodies = 0
      const result = await runAutocannon(
        {
          url: side.url + PROXIED_PATH,
          connections: PROXY_CONNECTIONS,
          duration: seconds,
          headers: side.headers,
          ...(rotate === undefined
            ? { expectBody: UPSTREAM_BODY }
            : {
                requests: [
                  {
                    method: 'GET',
                    path: PROXIED_PATH,
                    setupRequest: (req: { headers?: Record<string, string> }) => ({
                      ...req,
                      headers: { ...req.headers, ...side.headers, 'x-service-acting-tenant': rotate() },
                    }),
                    onResponse: (_status: number, body: string) => {
                      if (body !== UPSTREAM_BODY) wrongBodies++
                    },
                  },
                ],
              }),
        },
        (ms) => latencies.push(ms),
      )
      const cpu = cpuSeconds(side.pid) - cpuBefore
      checkInterrupted()
      const failed = failedRequests(result) ?? (wrongBodies > 0 ? `${wrongBodies} bodies other than ${UPSTREAM_BODY}` : null)
      if (failed !== null) throw new Error(`${side.name} ${round}: ${failed}`)
      latencies.sort((a, b) => a - b)
      const r: ProxyRound = {
        side: side.name,
        round,
        requests: result.requests.total,
        perSecond: result.requests.total / result.duration,
        p50: percentile(latencies, 0.5),
        p99: percentile(latencies, 0.99),
        cpuMicros: (cpu * 1e6) / result.requests.total,
      }
      log(`    ${side.name} ${round}: ${fmt(r.perSecond)} req/s, p50 ${r.p50.toFixed(3)} ms, p99 ${r.p99.toFixed(3)} ms, ${r.cpuMicros.toFixed(1)} µs CPU/request`)
      return r
    }
    const lookupNames = ['tgw_store_lookups_total{tier="redis"}', 'tgw_store_lookups_total{tier="postgres"}']
    for (const side of sides) await load(side, PROXY_WARMUP, 'warm-up')
    const rounds: ProxyRound[] = []
    const lookups: Record<string, string> = {}
    for (let r = 1; r <= PROXY_ROUNDS; r++) {
      for (const side of sides) {
        await sleep(500)
        const before = await scrape(gateway.metricsPort, lookupNames)
        const round = await load(side, PROXY_DURATION, String(r))
        rounds.push(round)
        if (side.name === 'bare') continue
        const after = await scrape(gateway.metricsPort, lookupNames)
        const delta = (name: string) => (after[name] ?? Number.NaN) - (before[name] ?? Number.NaN)
        const perRequest = (name: string) => (delta(name) / round.requests).toFixed(3)
        lookups[side.name] = `${lookups[side.name] === undefined ? '' : `${lookups[side.name]}; `}round ${r}: ${fmt(delta(lookupNames[0]!))} Redis, ${fmt(delta(lookupNames[1]!))} Postgres (${perRequest(lookupNames[0]!)} + ${perRequest(lookupNames[1]!)} per request)`
      }
    }
    const summary = (side: ProxySide): ProxyRound => {
      const mine = rounds.filter((r) => r.side === side)
      return {
        side,
        round: 'median',
        requests: mine.reduce((sum, r) => sum + r.requests, 0),
        perSecond: median(mine.map((r) => r.perSecond)),
        p50: median(mine.map((r) => r.p50)),
        p99: median(mine.map((r) => r.p99)),
        cpuMicros: median(mine.map((r) => r.cpuMicros)),
      }
    }
    return { rounds, medians: sides.map((side) => summary(side.name)), lookups }
  } finally {
    if (gateway !== null) await stopGateway(gateway)
    await stopChild(bare.child, 5_000)
  }
}

interface MemorySample {
  seconds: number
  distinctKeys: number
  rssMb: number
  heapUsedMb: number
  heapTotalMb: number
  /** The longest event-loop delay since the previous scrape (prom-client resets it per scrape). */
  loopLagMaxMs: number
  perSecond: number
}

interface MemoryRun {
  runtime: GatewayRuntime
  /** GC time by kind over the run, from the gateway's metrics. */
  gc: string
  /** The end of what the gateway wrote (LOG_LEVEL=warn): empty when all went well. */
  gatewayLog: string
  /** CPU time of the gateway process per request (user + system), µs. */
  cpuMicros: number
  samples: MemorySample[]
  requests: number
  seconds: number
  failed: string | null
  lookups: string
  apiKeys: { before: Record<string, string>; after: Record<string, string> }
}

/** RSS of one gateway while every seeded key is used once, in an order that hops across the index. */
async function memory(url: string, seeded: Seeded, upstreamUrl: string, runtime: GatewayRuntime): Promise<MemoryRun> {
  const totalKeys = seeded.subAccounts * seeded.keysPerSub
  const keys = Math.min(MEMORY_KEYS, totalKeys)
  log(`\n  memory (${runtime}): ${keys.toLocaleString('en-US')} distinct keys, ${MEMORY_CONNECTIONS} connections…`)
  const stats = postgres(url, { max: 1, onnotice: () => {} })
  const tableStats = async () => {
    const [row] = await stats<Record<string, string>[]>`
      select n_tup_upd::text as updates, n_tup_hot_upd::text as hot_updates,
             pg_size_pretty(pg_relation_size('api_keys')) as heap,
             pg_size_pretty(pg_indexes_size('api_keys')) as indexes
      from pg_stat_user_tables where relname = 'api_keys'`
    return row!
  }
  let gateway: GatewayProcess | null = null
  try {
    const apiKeysBefore = await tableStats()
    gateway = await startGateway(url, upstreamUrl, `memory-${runtime}`, runtime)
    const pid = gateway.child.pid
    const order = spread(totalKeys)
    let sent = 0
    let answered = 0
    const samples: MemorySample[] = []
    const started = performance.now()
    const heapName = 'nodejs_heap_size_used_bytes'
    const heapTotalName = 'nodejs_heap_size_total_bytes'
    const lagName = 'nodejs_eventloop_lag_max_seconds'
    const sample = async () => {
      const seconds = (performance.now() - started) / 1000
      const scraped = await scrape(gateway!.metricsPort, [heapName, heapTotalName, lagName])
      const previous = samples[samples.length - 1]
      const s: MemorySample = {
        seconds,
        distinctKeys: answered,
        rssMb: rssBytes(pid) / 2 ** 20,
        heapUsedMb: (scraped[heapName] ?? Number.NaN) / 2 ** 20,
        heapTotalMb: (scraped[heapTotalName] ?? Number.NaN) / 2 ** 20,
        loopLagMaxMs: (scraped[lagName] ?? Number.NaN) * 1000,
        perSecond: previous === undefined ? 0 : (answered - previous.distinctKeys) / (seconds - previous.seconds),
      }
      samples.push(s)
      return s
    }
    await sample()
    const timer = setInterval(() => {
      void sample().then((s) => {
        if (samples.length % 10 === 0) {
          log(`    ${s.seconds.toFixed(0)} s: ${fmt(s.distinctKeys)} keys, RSS ${s.rssMb.toFixed(0)} MB, heap ${s.heapUsedMb.toFixed(0)} / ${s.heapTotalMb.toFixed(0)} MB, ${fmt(s.perSecond)} req/s`)
        }
      })
    }, 2000)
    const lookupNames = ['tgw_store_lookups_total{tier="redis"}', 'tgw_store_lookups_total{tier="postgres"}']
    let result: AutocannonResult
    const cpuBefore = cpuSeconds(pid)
    try {
      result = await runAutocannon(
        {
          url: gateway.base + PROXIED_PATH,
          connections: MEMORY_CONNECTIONS,
          amount: keys,
          timeout: 30,
          requests: [
            {
              method: 'GET',
              path: PROXIED_PATH,
              // Key number `order(sent)`: every seeded key once; 1 in 100 belong to deactivated sub-accounts (403).
              setupRequest: (req: { headers?: Record<string, string> }) => ({
                ...req,
                headers: { ...req.headers, authorization: `Bearer ${keyFor(seeded.seed, order(sent++))}` },
              }),
            },
          ],
        },
        () => answered++,
      )
    } finally {
      clearInterval(timer)
    }
    const cpuMicros = ((cpuSeconds(pid) - cpuBefore) * 1e6) / answered
    await sample()
    // Ten more seconds idle: does RSS come down once the load stops?
    for (let i = 0; i < 5; i++) {
      await sleep(2000)
      await sample()
    }
    const gcNames = ['major', 'minor', 'incremental'].flatMap((kind) => [`nodejs_gc_duration_seconds_sum{kind="${kind}"}`, `nodejs_gc_duration_seconds_count{kind="${kind}"}`])
    const scraped = await scrape(gateway.metricsPort, [...lookupNames, ...gcNames])
    const gc = ['major', 'minor', 'incremental']
      .map((kind) => `${kind} GC ${fmt(scraped[`nodejs_gc_duration_seconds_count{kind="${kind}"}`] ?? Number.NaN)}× ${(scraped[`nodejs_gc_duration_seconds_sum{kind="${kind}"}`] ?? Number.NaN).toFixed(1)} s`)
      .join(', ')
    // Statuses other than 200: the 403s of keys of deactivated sub-accounts are expected.
    const codes = Object.entries(result.statusCodeStats).filter(([code]) => code !== '200' && code !== '403')
    const failed =
      codes.length > 0 || result.errors > 0 || result.timeouts > 0
        ? `${codes.map(([code, { count }]) => `${code}×${count}`).join(', ')} ${result.errors} errors, ${result.timeouts} timeouts`
        : null
    await sleep(2000) // the last usage and last_used_at flush
    return {
      runtime,
      gc: `${gc} (of ${result.duration.toFixed(0)} s)`,
      gatewayLog: gateway.output().trim(),
      cpuMicros,
      samples,
      requests: result.requests.total,
      seconds: result.duration,
      failed,
      lookups: `${fmt(scraped[lookupNames[1]!] ?? Number.NaN)} Postgres, ${fmt(scraped[lookupNames[0]!] ?? Number.NaN)} Redis lookups in all; statuses ${Object.entries(result.statusCodeStats).map(([code, { count }]) => `${code}×${fmt(count)}`).join(', ')}`,
      apiKeys: { before: apiKeysBefore, after: await tableStats() },
    }
  } finally {
    if (gateway !== null) await stopGateway(gateway)
    await stats.end()
  }
}

// ---------------------------------------------------------------------------------------------
// The report.

function table(header: string[], rows: string[][], leftColumns = 1): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)))
  const line = (cells: string[]) => `| ${cells.map((c, i) => (i < leftColumns ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ')} |`
  return [line(header), `|${widths.map((w, i) => (i < leftColumns ? `:${'-'.repeat(w + 1)}` : `${'-'.repeat(w + 1)}:`)).join('|')}|`, ...rows.map(line)]
}

function command(): string {
  const env = [
    `BENCH_SCALES=${SCALES.join(',')}`,
    `BENCH_N=${N}`,
    `BENCH_WARMUP=${WARMUP}`,
    `BENCH_KEYS_PER_SUB=${KEYS_PER_SUB}`,
    `BENCH_MEMORY_KEYS=${MEMORY_KEYS}`,
    `BENCH_MEMORY_CONNECTIONS=${MEMORY_CONNECTIONS}`,
    `BENCH_MEMORY_RUNTIMES=${MEMORY_RUNTIMES.join(',')}`,
    ...(GATEWAY_NODE_ARGS.length > 0 ? [`BENCH_GATEWAY_NODE_ARGS='${GATEWAY_NODE_ARGS.join(' ')}'`] : []),
    ...(SKIP_LATENCY ? ['BENCH_SKIP_LATENCY=1'] : []),
    ...(GATEWAY_DIST !== null ? [`BENCH_GATEWAY_DIST=${GATEWAY_DIST}`] : []),
    ...(SEED_SQL !== '' ? [`BENCH_SEED_SQL='${SEED_SQL}'`] : []),
    ...(ALTER_DATABASE.length > 0 ? [`BENCH_ALTER_DATABASE='${ALTER_DATABASE.map((a) => `${a.name}=${a.value}`).join(';')}'`] : []),
    `BENCH_PROXY_ROUNDS=${PROXY_ROUNDS}`,
    `BENCH_PROXY_DURATION=${PROXY_DURATION}`,
    `BENCH_PROXY_CONNECTIONS=${PROXY_CONNECTIONS}`,
  ]
  for (const name of ['BENCH_DATABASE_URL', 'BENCH_REDIS_URL']) {
    const value = envForCommand(name)
    if (value !== null) env.push(value)
  }
  return `${env.join(' ')} npx tsx bench/scale.ts`
}

let chosenNode: ServerNode | null = null
/**
 * The node of the processes this bench starts (the upstream, and the proxy ratio's and the memory
 * run's gateways and bare proxy): the image's, as in bench/proxy.ts (BENCH_NODE, bench/lib.ts).
 * The latencies are measured on a gateway built in this process, on this process's node.
 */
function processNode(): ServerNode {
  return (chosenNode ??= serverNode())
}

async function versions(redis: Redis): Promise<{ postgres: string; redis: string }> {
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} })
  try {
    const [row] = await admin<{ server_version: string }[]>`show server_version`
    const info = await redis.info('server')
    return { postgres: row?.server_version ?? '?', redis: /redis_version:(\S+)/.exec(info)?.[1] ?? '?' }
  } finally {
    await admin.end()
  }
}

function report(runs: ScaleRun[], proxy: ProxyRun | null, mems: MemoryRun[], v: { postgres: string; redis: string }, startedAt: Date): string[] {
  const cpus = os.cpus()
  const out: string[] = []
  out.push(`date      ${startedAt.toISOString()} (took ${((Date.now() - startedAt.getTime()) / 60_000).toFixed(1)} min)`)
  out.push(`machine   ${cpus[0]?.model.trim() ?? '?'}, ${cpus.length} cores, ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB RAM, ${os.platform()} ${os.release()}; load average at the end ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`)
  out.push(`software  node ${process.version} (this process: seeding, the latencies), servers in their own processes on ${processNode().version} (${processNode().reason}); Postgres ${v.postgres}, Redis ${v.redis}, fastify ${packageVersion('fastify')}, postgres.js ${packageVersion('postgres')}, ioredis ${packageVersion('ioredis')}, autocannon ${packageVersion('autocannon')}`)
  out.push(`gateway   ${gitDescription()}`)
  out.push(`command   ${command()}`)
  out.push(`setup     one parent; ${KEYS_PER_SUB} keys per sub-account; ${USAGE_DAYS} days of usage for 9 in 10 sub-accounts; 1 in 100 deactivated`)
  out.push('          latencies: one request at a time over one keep-alive loopback connection to a gateway built in this process (buildApp),')
  out.push(`          ${N} timed samples per operation after ${WARMUP} untimed, the cache state of each sample prepared untimed; ms`)
  out.push('')
  out.push('seeding (s):')
  out.push(
    ...table(
      ['phase', ...runs.map((r) => `${r.scale.toLocaleString('en-US')}`)],
      Object.keys(runs[runs.length - 1]!.seeded.timings).map((phase, i) => [
        phase.replace(/\(.*\)/, '').trim(),
        ...runs.map((r) => (Object.values(r.seeded.timings)[i]! / 1000).toFixed(1)),
      ]),
    ),
  )
  out.push(`table sizes: ${runs.map((r) => `${r.scale.toLocaleString('en-US')}: ${Object.entries(r.sizes).map(([k, v]) => `${k} ${v}`).join(', ')}`).join('; ')}`)
  out.push('')
  const largest = runs[runs.length - 1]!
  if (!SKIP_LATENCY) {
    const header = [
      'operation',
      ...runs.flatMap((r) => [`${r.scale / 1000}k p50`, `${r.scale / 1000}k p99`]),
      `p50 ${largest.scale / 1000}k/${runs[0]!.scale / 1000}k`,
      'Redis+PG lookups/req',
    ]
    const rows = largest.results.map((result, i) => [
      result.operation,
      ...runs.flatMap((r) => [r.results[i]!.p50.toFixed(3), r.results[i]!.p99.toFixed(3)]),
      (result.p50 / runs[0]!.results[i]!.p50).toFixed(2),
      `${result.redisPerSample.toFixed(1)} + ${result.postgresPerSample.toFixed(1)}`,
    ])
    rows.push([
      'usage walk, 100/page, page latency',
      ...runs.flatMap((r) => [r.usageWalk!.p50.toFixed(3), r.usageWalk!.p99.toFixed(3)]),
      (largest.usageWalk!.p50 / runs[0]!.usageWalk!.p50).toFixed(2),
      '',
    ])
    out.push(...table(header, rows))
    out.push('')
    out.push('usage report walked by next_cursor, 100 sub-accounts a page, 30 days:')
    out.push(
      ...table(
        ['scale', 'sub-accounts listed', 'pages timed (walks)', 'one walk, s', 'page p50', 'page p99', 'max', 'median, first 10 %', 'middle 10 %', 'last 10 %'],
        runs.map((r) => [
          r.scale.toLocaleString('en-US'),
          fmt(Math.round(r.scale * 0.9)),
          `${r.usageWalk!.pages} (${r.usageWalk!.walks})`,
          (r.usageWalk!.totalMs / 1000).toFixed(1),
          r.usageWalk!.p50.toFixed(2),
          r.usageWalk!.p99.toFixed(2),
          r.usageWalk!.max.toFixed(2),
          r.usageWalk!.firstTenth.toFixed(2),
          r.usageWalk!.middleTenth.toFixed(2),
          r.usageWalk!.lastTenth.toFixed(2),
        ]),
      ),
    )
  }
  if (proxy !== null) {
    out.push('')
    out.push(
      `proxy ratio at ${largest.scale.toLocaleString('en-US')} sub-accounts (bench/proxy.ts's comparison on the seeded database; GET ${PROXIED_PATH}, ` +
        `${PROXY_CONNECTIONS} connections; "gateway": parent key acting as ext:${extIdOf(1)}, as bench/proxy.ts does; ` +
        '"gateway, spread": acting as every active sub-account in turn, by ext:):',
    )
    out.push(
      ...table(
        ['side', 'round', 'requests', 'req/s', 'p50 ms', 'p99 ms', 'CPU µs/req'],
        [...proxy.rounds, ...proxy.medians].map((r) => [r.side, r.round, fmt(r.requests), fmt(r.perSecond), r.p50.toFixed(3), r.p99.toFixed(3), r.cpuMicros.toFixed(1)]),
        2,
      ),
    )
    const [bare, ...gateways] = proxy.medians
    for (const g of gateways) {
      const ratio = g.perSecond / bare!.perSecond
      out.push(
        `${g.side} / bare: req/s ${ratio.toFixed(3)} (target ≥ 0.90: ${ratio >= 0.9 ? 'met' : 'NOT MET'}), p50 ${(g.p50 / bare!.p50).toFixed(3)}, ` +
          `p99 ${(g.p99 / bare!.p99).toFixed(3)}, CPU/request ${(g.cpuMicros / bare!.cpuMicros).toFixed(3)} (medians)`,
      )
      out.push(`  store lookups: ${proxy.lookups[g.side] ?? '?'}`)
    }
  }
  for (const mem of mems) {
    out.push('')
    // The command startGateway ran (the image's node flags, then BENCH_GATEWAY_NODE_ARGS).
    const how = `node ${gatewayArgs(mem.runtime, ROOT, distDir, GATEWAY_NODE_ARGS).join(' ')}${mem.runtime === 'dist' ? ', compiled as the image is' : ''}`
    out.push(
      `memory (${mem.runtime}): one gateway process (${how}); ` +
        `${fmt(mem.requests)} requests in ${mem.seconds.toFixed(0)} s, each with a seeded key not used before, ${MEMORY_CONNECTIONS} connections; ` +
        `${mem.cpuMicros.toFixed(0)} µs CPU per request`,
    )
    out.push(`        ${mem.lookups}${mem.failed === null ? '' : `; FAILED: ${mem.failed}`}`)
    const peak = Math.max(...mem.samples.map((s) => s.rssMb))
    const every = Math.max(1, Math.floor(mem.samples.length / 30))
    out.push(
      ...table(
        ['t, s', 'distinct keys used', 'RSS MB', 'V8 heap used MB', 'V8 heap total MB', 'req/s'],
        mem.samples
          .filter((_, i) => i % every === 0 || i === mem.samples.length - 1)
          .map((s) => [s.seconds.toFixed(0), fmt(s.distinctKeys), s.rssMb.toFixed(1), s.heapUsedMb.toFixed(1), s.heapTotalMb.toFixed(1), fmt(s.perSecond)]),
      ),
    )
    const full = mem.samples.filter((s) => s.distinctKeys >= 150_000)
    const plateau = full.length > 0 ? `; once 150,000 keys were used (the 100,000-entry LRU full): RSS ${Math.min(...full.map((s) => s.rssMb)).toFixed(0)}–${Math.max(...full.map((s) => s.rssMb)).toFixed(0)} MB` : ''
    out.push(`peak RSS ${peak.toFixed(1)} MB (target ≤ 256 MB: ${peak <= 256 ? 'met' : 'NOT MET'})${plateau}`)
    const lags = mem.samples.map((s) => s.loopLagMaxMs).filter((l) => !Number.isNaN(l)).sort((a, b) => a - b)
    if (lags.length > 0) {
      out.push(`event-loop delay, longest per 2 s sample: median ${median(lags).toFixed(0)} ms, max ${lags[lags.length - 1]!.toFixed(0)} ms; ${mem.gc}`)
    }
    const heapLows = full.map((s) => s.heapUsedMb).sort((a, b) => a - b)
    if (heapLows.length > 0) out.push(`V8 heap used once the LRU was full: lowest ${heapLows[0]!.toFixed(0)} MB (≈ the live set after a full GC), median ${median(heapLows).toFixed(0)} MB`)
    out.push(`api_keys before: ${JSON.stringify(mem.apiKeys.before)}; after: ${JSON.stringify(mem.apiKeys.after)} (last_used_at writes of the run)`)
    if (mem.gatewayLog !== '') out.push('the gateway wrote (last lines):', ...mem.gatewayLog.split('\n').slice(-12).map((l) => `  ${l.slice(0, 300)}`))
  }
  return out
}

async function main(): Promise<void> {
  const startedAt = new Date()
  const redis = new Redis(REDIS_URL)
  let upstream: ChildProcess | null = null
  try {
    const v = await versions(redis)
    const up = await forkChild(PROXY_SCRIPT, 'upstream', ['upstream'], { node: processNode().path })
    upstream = up.child
    const upstreamUrl = `http://127.0.0.1:${up.port}`
    const runs: ScaleRun[] = []
    let proxy: ProxyRun | null = null
    const mems: MemoryRun[] = []
    const failures: string[] = []
    writeFileSync(EXPLAIN_OUT, '')
    for (const scale of SKIP_LATENCY ? [Math.max(...SCALES)] : [...SCALES].sort((a, b) => a - b)) {
      const run = await runScale(scale, redis, upstreamUrl, async (url, seeded) => {
        // A failure here is reported with the figures already taken, not instead of them.
        const attempt = async (what: string, step: () => Promise<void>) => {
          try {
            await step()
          } catch (err) {
            if (interrupted) throw err
            log(`  ${what} failed: ${err instanceof Error ? err.stack : String(err)}`)
            failures.push(`${what} FAILED: ${err instanceof Error ? err.message : String(err)}`)
          }
        }
        if (PROXY_ROUNDS > 0) await attempt('proxy ratio', async () => {
          proxy = await proxyRatio(url, seeded, upstreamUrl)
        })
        if (MEMORY_KEYS > 0) {
          for (const runtime of MEMORY_RUNTIMES) await attempt(`memory (${runtime})`, async () => {
            mems.push(await memory(url, seeded, upstreamUrl, runtime))
          })
        }
      })
      runs.push(run)
      appendFileSync(EXPLAIN_OUT, run.explains.join('\n'))
    }
    const lines = report(runs, proxy, mems, v, startedAt)
    if (failures.length > 0) lines.push('', ...failures)
    lines.push('', `EXPLAIN (ANALYZE, BUFFERS) of every query at every scale: ${EXPLAIN_OUT}`)
    console.log(lines.join('\n'))
  } finally {
    await stopChild(upstream, 5_000)
    redis.disconnect()
    if (distDir !== null && distDir !== GATEWAY_DIST) rmSync(distDir, { recursive: true, force: true })
  }
}

await main().then(
  () => {
    process.exitCode = 0
  },
  (err: unknown) => {
    console.error('bench failed:', err instanceof Error && err.message === 'interrupted' ? 'interrupted' : err)
    process.exitCode = 1
  },
)
