// Latency of the management API over real sockets against a real Postgres, run by hand:
//   npm run bench:management        (env: BENCH_N=2000, BENCH_DATABASE_URL=postgres://…/postgres)
// Requests are sent one at a time, so the figures are per-request latency, not peak throughput.
// Shared machines are noisy: compare each operation's ratio over the trivial-route baseline that
// is measured in the same run, not the raw milliseconds between runs.
import { randomBytes } from 'node:crypto'
import os from 'node:os'
import { performance } from 'node:perf_hooks'
import Fastify, { type FastifyInstance } from 'fastify'
import postgres from 'postgres'
import { buildApp } from '../src/app.js'
import { createParentWithKey } from '../src/auth/mint.js'
import { loadConfig } from '../src/config.js'
import type { Sql } from '../src/store/db.js'
import { migrate } from '../src/store/migrate.js'

const ADMIN_URL = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'
const N = positiveInt('BENCH_N', 2000)
const WARMUP = 100
const SEEDED = 10_000
/** How many rows precede the "deep" list page. */
const DEEP = 9_000

function positiveInt(name: string, fallback: number): number {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  if (!/^[1-9]\d*$/.test(raw)) throw new Error(`${name} must be a positive integer, got "${raw}"`)
  return Number(raw)
}

// Ctrl-C stops the current loop instead of the process, so the database is still dropped.
let interrupted = false
process.once('SIGINT', () => {
  interrupted = true
})

interface Call {
  method: 'GET' | 'POST'
  path: string
  headers?: Record<string, string>
  body?: unknown
}

/**
 * One request through the global fetch. Its dispatcher keeps connections alive, so sequential
 * calls reuse one socket (the connection counts printed at the end show it). The body is read in
 * full: a response is not answered until its last byte arrived.
 */
async function send(base: string, call: Call, expected: number): Promise<string> {
  const init: RequestInit = { method: call.method, headers: { ...call.headers } }
  if (call.body !== undefined) {
    init.body = JSON.stringify(call.body)
    ;(init.headers as Record<string, string>)['content-type'] = 'application/json'
  }
  const response = await fetch(base + call.path, init)
  const text = await response.text()
  if (response.status !== expected) {
    throw new Error(`${call.method} ${call.path}: expected ${expected}, got ${response.status}: ${text.slice(0, 500)}`)
  }
  return text
}

interface Result {
  operation: string
  n: number
  p50: number
  p99: number
  perSecond: number
}

/** Nearest-rank percentile of sorted values. */
function percentile(sorted: number[], p: number): number {
  return sorted[Math.max(0, Math.ceil(p * sorted.length) - 1)]!
}

/** WARMUP untimed calls (JIT, plan caches, pool connections), then N timed ones. */
async function measure(operation: string, base: string, nextCall: () => Call, expected: number): Promise<Result> {
  for (let i = 0; i < WARMUP; i++) await send(base, nextCall(), expected)
  const latencies = new Array<number>(N)
  const started = performance.now()
  for (let i = 0; i < N; i++) {
    if (interrupted) throw new Error('interrupted')
    const call = nextCall()
    const t0 = performance.now()
    await send(base, call, expected)
    latencies[i] = performance.now() - t0
  }
  const elapsed = performance.now() - started
  latencies.sort((a, b) => a - b)
  const result = { operation, n: N, p50: percentile(latencies, 0.5), p99: percentile(latencies, 0.99), perSecond: (N / elapsed) * 1000 }
  console.error(`  ${operation}: done`)
  return result
}

/** Listens on an ephemeral loopback port and counts the TCP connections it accepts. */
async function listen(app: FastifyInstance): Promise<{ base: string; connections: () => number }> {
  let connections = 0
  app.server.on('connection', () => connections++)
  const address = await app.listen({ host: '127.0.0.1', port: 0 })
  return { base: address, connections: () => connections }
}

function printReport(results: Result[], baseline: Result, env: { postgres: string; connections: string }): void {
  const cpus = os.cpus()
  console.log(`date      ${new Date().toISOString()}`)
  console.log(`machine   ${cpus[0]?.model.trim() ?? 'unknown cpu'}, ${cpus.length} cores, ${os.platform()} ${os.release()}`)
  console.log(`node      ${process.version}`)
  console.log(`postgres  ${env.postgres}`)
  console.log(`setup     ${SEEDED} seeded sub-accounts under one parent; ${WARMUP} warm-up requests per row; sequential, keep-alive`)
  console.log(`sockets   ${env.connections}`)
  console.log('')
  const header = ['operation', 'n', 'p50 ms', 'p99 ms', 'req/s', 'p50 / ping p50']
  const rows = [baseline, ...results].map((r) => [
    r.operation,
    String(r.n),
    r.p50.toFixed(3),
    r.p99.toFixed(3),
    r.perSecond.toFixed(0),
    (r.p50 / baseline.p50).toFixed(2),
  ])
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)))
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ')
  console.log(line(header))
  console.log(line(widths.map((w) => '-'.repeat(w))))
  for (const row of rows) console.log(line(row))
}

async function main(): Promise<void> {
  const dbName = `tgw_bench_${randomBytes(6).toString('hex')}`
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} })
  const url = new URL(ADMIN_URL)
  url.pathname = `/${dbName}`
  let sql: Sql | null = null
  let app: FastifyInstance | null = null
  let ping: FastifyInstance | null = null
  try {
    await admin.unsafe(`create database ${dbName}`)
    // The same pool size the gateway uses against a real Postgres (src/store/db.ts).
    sql = postgres(url.toString(), { max: 10, onnotice: () => {} })
    const db = sql
    await migrate(db)
    const [versionRow] = await db<{ server_version: string }[]>`show server_version`

    console.error(`seeding ${SEEDED} sub-accounts in ${dbName}…`)
    const parent = await db.begin((tx) => createParentWithKey(tx, { name: 'bench parent', externalId: null, extraScopes: [] }))
    const parentId = parent.account.id
    await db`
      insert into tenants (parent_id, name, external_id)
      select ${parentId}, 'seeded ' || n, 'ext-' || n from generate_series(1, ${SEEDED}::int) as n`
    // Fresh statistics, so the planner sees 10k rows and not the empty table of a moment ago.
    await db`analyze tenants`
    await db`analyze api_keys`
    const seededIds = (await db<{ id: string }[]>`select id from tenants where parent_id = ${parentId}`).map((r) => r.id)
    if (seededIds.length !== SEEDED) throw new Error(`seeded ${seededIds.length} sub-accounts, expected ${SEEDED}`)

    app = await buildApp({ config: loadConfig({ DATABASE_URL: url.toString() }), store: { sql: db, embedded: false, close: async () => {} } })
    const gateway = await listen(app)
    ping = Fastify({ logger: false })
    ping.get('/ping', async () => ({ ok: true }))
    const pingServer = await listen(ping)

    const auth = { authorization: `Bearer ${parent.key.apiKey}` }

    // The cursor after row DEEP, found once by walking the list 100 rows at a time.
    let deepCursor: string | null = null
    for (let walked = 0; walked < DEEP; walked += 100) {
      const query: string = deepCursor === null ? '?limit=100' : `?limit=100&cursor=${encodeURIComponent(deepCursor)}`
      const page = JSON.parse(await send(gateway.base, { method: 'GET', path: `/v1/sub-accounts${query}`, headers: auth }, 200)) as {
        data: unknown[]
        next_cursor: string | null
      }
      if (page.data.length !== 100 || page.next_cursor === null) throw new Error(`walking the list: short page after ${walked} rows`)
      deepCursor = page.next_cursor
    }
    const deepPath = `/v1/sub-accounts?limit=20&cursor=${encodeURIComponent(deepCursor!)}`
    // One content check per read, outside the timed loops, which check statuses only.
    const deepPage = JSON.parse(await send(gateway.base, { method: 'GET', path: deepPath, headers: auth }, 200)) as { data: { name: string }[] }
    // The row a correct keyset walk must land on. A mismatch is a correctness bug, not a
    // benchmark failure: it is reported above the table and the timings are still taken.
    const [expectedRow] = await db<{ name: string }[]>`
      select name from tenants where parent_id = ${parentId} order by tenants.seq offset ${DEEP} limit 1`
    const warnings: string[] = []
    if (deepPage.data[0]?.name !== expectedRow?.name) {
      warnings.push(
        `WARNING: walking ${DEEP} rows by next_cursor lands on "${deepPage.data[0]?.name}", not "${expectedRow?.name}": ` +
          'the list is not in insertion order, so the list figures are not those of a keyset page',
      )
    }
    const one = JSON.parse(await send(gateway.base, { method: 'GET', path: `/v1/sub-accounts/${seededIds[0]}`, headers: auth }, 200)) as { id: string }
    if (one.id !== seededIds[0]) throw new Error(`GET returned ${one.id}, expected ${seededIds[0]}`)

    console.error(`measuring, N=${N}…`)
    const baseline = await measure('GET /ping (baseline)', pingServer.base, () => ({ method: 'GET', path: '/ping' }), 200)
    let created = 0
    const results: Result[] = []
    // The parent has active sub-accounts, so a write must name its tenant (DESIGN §4).
    results.push(
      await measure(
        'create',
        gateway.base,
        () => ({
          method: 'POST',
          path: '/v1/sub-accounts',
          headers: { ...auth, 'x-service-acting-tenant': 'self' },
          body: { name: `bench ${++created}` },
        }),
        201,
      ),
    )
    results.push(
      await measure(
        'get',
        gateway.base,
        () => ({ method: 'GET', path: `/v1/sub-accounts/${seededIds[Math.floor(Math.random() * SEEDED)]}`, headers: auth }),
        200,
      ),
    )
    results.push(await measure('list first page (20)', gateway.base, () => ({ method: 'GET', path: '/v1/sub-accounts?limit=20', headers: auth }), 200))
    results.push(await measure(`list page at ${DEEP} (20)`, gateway.base, () => ({ method: 'GET', path: deepPath, headers: auth }), 200))

    for (const warning of warnings) console.log(warning)
    printReport(results, baseline, {
      postgres: versionRow?.server_version ?? 'unknown',
      connections: `gateway accepted ${gateway.connections()} connection(s), ping ${pingServer.connections()}`,
    })
  } finally {
    // Teardown runs on success and on failure alike; each step is attempted even if one fails.
    await ping?.close().catch((err) => console.error('closing the ping server:', err))
    await app?.close().catch((err) => console.error('closing the gateway:', err))
    await sql?.end({ timeout: 5 }).catch((err) => console.error('closing the pool:', err))
    await admin
      .unsafe(`drop database if exists ${dbName} with (force)`)
      .catch((err) => console.error(`dropping ${dbName} failed; drop it by hand:`, err))
    await admin.end({ timeout: 5 })
  }
}

main().then(
  () => {
    process.exitCode = 0
  },
  (err) => {
    console.error('bench failed:', err)
    process.exitCode = 1
  },
)
