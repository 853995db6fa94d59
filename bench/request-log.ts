// The request log's three figures (docs/operations.md#request-log): the proxy's throughput with the
// log on against off in the same run, the records a second one replica's writer puts into
// Postgres, and the API's filtered pages over 10 million records. bench/README.md says what it
// starts, what it prints and its knobs.
import { createHash } from 'node:crypto'
import os from 'node:os'
import { performance } from 'node:perf_hooks'
import pino from 'pino'
import postgres from 'postgres'
import { dayOf, ensurePartition } from '../src/request-log/partitions.js'
import type { RequestFilter } from '../src/request-log/filters.js'
import { listRequests } from '../src/request-log/queries.js'
import type { RequestRecord } from '../src/request-log/capture.js'
import { ensureRequestLogTable, RECORD_ARRAYS } from '../src/request-log/schema.js'
import { DEFAULT_BATCH_RECORDS, RequestLogWriter } from '../src/request-log/writer.js'
import { openStore } from '../src/store/db.js'
import {
  ADMIN_URL,
  checkInterrupted,
  cpuSeconds,
  client,
  createDatabase,
  envInt,
  fmt,
  type Gateway,
  isInterrupted,
  load,
  type Measured,
  measureInTurn,
  median,
  medianOf,
  pairsRatio,
  metric,
  ms,
  percentile,
  type Pinning,
  pin,
  pinnedTo,
  pinning,
  reportHead,
  ROUND_COLUMNS,
  roundCells,
  roundLine,
  run,
  scrape,
  type Server,
  seedActing,
  sleep,
  startGateway,
  startUpstream,
  stopChild,
  table,
} from './lib.js'

const PARTS = (process.env.BENCH_PARTS || 'proxy,writer,query').split(',').map((part) => part.trim())
const DURATION = envInt('BENCH_DURATION', 5)
/** Rounds per side in each pair of gateway processes. */
const ROUNDS = envInt('BENCH_ROUNDS', 4)
/**
 * Pairs of gateway processes part 1 starts, one after the other: two processes of one build and
 * settings differ by up to 5 % for their whole life (bench/README.md, the request log), which more
 * rounds of the same pair cannot average out.
 */
const PAIRS = envInt('BENCH_PAIRS', 4)
const WARMUP = envInt('BENCH_WARMUP', 5)
const WARMUP_ROUNDS = envInt('BENCH_WARMUP_ROUNDS', 2)
/** One load per count, e.g. `32,1`. */
const CONNECTIONS = (process.env.BENCH_CONNECTIONS || '32').split(',').map((n) => {
  if (!/^\d+$/.test(n.trim()) || Number(n) < 1) throw new Error(`BENCH_CONNECTIONS: "${n}" is not a count`)
  return Number(n)
})
/** Requests a second for part 1, instead of as many as each side takes: its CPU per request unmixed with its speed. */
const RATE = process.env.BENCH_RATE === undefined ? undefined : envInt('BENCH_RATE', 0)
const WRITER_RECORDS = envInt('BENCH_WRITER_RECORDS', 200_000)
const WRITER_ROUNDS = envInt('BENCH_WRITER_ROUNDS', 3)
const LOG_ROWS = envInt('BENCH_LOG_ROWS', 10_000_000)
const QUERY_RUNS = envInt('BENCH_QUERY_RUNS', 200)
const RETENTION_DAYS = 7
/** Part 1 with the log off on both sides: what the bench reads when nothing differs (its noise). */
const CONTROL = process.env.BENCH_CONTROL === '1'
const SEED_PARENTS = 50
const SEED_SUBS = 200
const SEED_KEYS = 3
const SEED_CHUNK = 500_000

const report: string[] = []
const say = (...lines: string[]) => {
  report.push(...lines)
  console.error(lines.join('\n'))
}

async function main(): Promise<void> {
  for (const part of PARTS)
    if (!['proxy', 'writer', 'query'].includes(part)) throw new Error(`BENCH_PARTS: no part "${part}"`)
  if (PARTS.includes('proxy')) await proxyOnOff()
  if (PARTS.includes('writer')) await writerRate()
  if (PARTS.includes('query')) await filteredPages()
  console.log([...reportHead('bench:request-log'), ...report].join('\n'))
}

// ---------------------------------------------------------------------------------------------
// 1. The proxy with the log on against off: pairs of gateway processes of one build on one
// database, Redis and upstream, the two of a pair differing by REQUEST_LOG_RETENTION_DAYS only,
// loaded in alternating rounds; one pair after the other.

type SideName = 'off' | 'on'
interface Round extends Measured {
  side: SideName
  /** The pair of gateway processes it ran on (1 to BENCH_PAIRS). */
  pair: number
  round: string
  /** µs of CPU the database's Postgres backends spent per request of the round (both sides share them). */
  postgresMicros: number
  /** Records written and dropped by the side's writer during the round (on only). */
  written: number
  dropped: number
}

async function proxyOnOff(): Promise<void> {
  const db = await createDatabase('request_log_proxy')
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} })
  const started: Server[] = []
  // The gateways on a CPU of their own; the load (this process), the upstream and the database's
  // backends on the others (pinning()).
  const pins = pinning()
  if (pins !== null) pin([process.pid], pins.rest)
  try {
    const upstream = await startUpstream({ wrap: pinnedTo(pins?.rest) })
    started.push(upstream)
    const start = async (side: SideName) => {
      const retentionDays = side === 'on' && !CONTROL ? RETENTION_DAYS : 0
      const gateway = await startGateway({
        databaseUrl: db.url,
        upstreamUrl: upstream.url,
        env: { REQUEST_LOG_RETENTION_DAYS: String(retentionDays) },
        wrap: pinnedTo(pins?.server),
      })
      started.push(gateway)
      return gateway
    }
    let acting: Awaited<ReturnType<typeof seedActing>> | null = null
    const rounds = new Map<number, Round[]>(CONNECTIONS.map((connections) => [connections, []]))
    for (let pair = 1; pair <= PAIRS; pair++) {
      // Each pair started in the other order than the one before: which starts first gets other ports and memory.
      const order: SideName[] = pair % 2 === 1 ? ['off', 'on'] : ['on', 'off']
      const gateways = {} as Record<SideName, Gateway>
      for (const side of order) gateways[side] = await start(side)
      acting ??= await seedActing(gateways.on, db.url)
      await preflight(gateways, acting.headers, acting.subId)
      const measure = measurer(gateways, acting.headers, db.name, admin, pins)
      for (const connections of CONNECTIONS) {
        const label = `pair ${pair} of ${PAIRS}, ${connections} connections`
        console.error(`${label}: warming up, ${WARMUP_ROUNDS} × ${WARMUP} s per side…`)
        for (let pass = 1; pass <= WARMUP_ROUNDS; pass++)
          for (const side of ['off', 'on'] as const) await measure(side, connections, WARMUP, pair, `warm-up ${pass}`)
        console.error(`${label}: measuring, ${ROUNDS} × ${DURATION} s per side…`)
        // The order turns every round, so that neither side always follows the other.
        for (let r = 1; r <= ROUNDS; r++) {
          const sides: SideName[] = r % 2 === 1 ? ['off', 'on'] : ['on', 'off']
          for (const side of sides)
            rounds.get(connections)!.push(await measure(side, connections, DURATION, pair, String(r)))
        }
      }
      for (const side of order) await stopChild(gateways[side].child)
    }
    for (const connections of CONNECTIONS) reportProxy(rounds.get(connections)!, connections, pins)
    const log = started.map((s) => s.output().trim()).filter((text) => text !== '')
    if (log.length > 0) console.error(`the servers wrote:\n${log.join('\n')}`)
  } catch (err) {
    if (!isInterrupted()) for (const server of started) console.error(`${server.url} wrote:\n${server.output()}`)
    throw err
  } finally {
    for (const server of started.reverse()) await stopChild(server.child).catch((err) => console.error(err))
    await admin.end()
    await db.drop()
  }
}

/** Both act as the sub-account; only `on` writes records, and its record arrives. */
async function preflight(gateways: Record<SideName, Gateway>, headers: Record<string, string>, subId: string) {
  for (const side of ['off', 'on'] as const) {
    const response = await fetch(`${gateways[side].url}/v1/things/echo`, { headers })
    const seen = (await response.json()) as Record<string, string>
    if (response.status !== 200 || seen['x-service-resolved-tenant'] !== subId)
      throw new Error(`${side}: GET /v1/things/echo answered ${response.status}: ${JSON.stringify(seen)}`)
  }
  // Written within a flush (every second) and its write: up to a few seconds after a start.
  let writtenOn = 0
  for (let waited = 0; !CONTROL && !(writtenOn > 0) && waited < 5_000; waited += 250) {
    await sleep(250)
    writtenOn = metric(await scrape(gateways.on.metricsPort), 'tgw_request_log_written_total')
  }
  const offSeries = (await scrape(gateways.off.metricsPort))?.has('tgw_request_log_written_total')
  if ((!CONTROL && !(writtenOn > 0)) || offSeries !== false)
    throw new Error(`pre-flight: on wrote ${writtenOn} records; off has the writer's metric: ${offSeries}`)
}

/** One round's load on a side of a pair, with its CPU, its Postgres backends' and its log's counts. */
function measurer(
  gateways: Record<SideName, Gateway>,
  headers: Record<string, string>,
  database: string,
  admin: postgres.Sql,
  pins: Pinning | null,
) {
  return async (side: SideName, connections: number, seconds: number, pair: number, round: string): Promise<Round> => {
    await sleep(500)
    const gateway = gateways[side]
    // A request warms the gateway again after idling through the other side's round.
    await fetch(`${gateway.url}/v1/things/1`, { headers }).then((res) => res.text())
    const before = await scrape(gateway.metricsPort)
    const backends = await backendsOf(admin, database)
    if (pins !== null) pin(backends, pins.rest) // the COPY's connection is opened again after a failure
    const postgresBefore = postgresCpu(backends)
    const r = await load({ url: gateway.url, headers, connections, seconds, rate: RATE, pid: gateway.child.pid })
    // The records of the round's last moments are written within a flush interval (250 ms).
    if (side === 'on') await sleep(500)
    const postgresMicros = ((postgresCpu(await backendsOf(admin, database)) - postgresBefore) * 1e6) / r.requests
    const after = await scrape(gateway.metricsPort)
    const delta = (name: string) => (side === 'on' ? metric(after, name) - metric(before, name) : 0)
    const written = delta('tgw_request_log_written_total')
    const dropped = delta('tgw_request_log_dropped_total')
    console.error(
      `${roundLine(`${side} ${connections}c pair ${pair} ${round}`, r)}${side === 'on' ? `, ${fmt(written)} written` : ''}`,
    )
    return { ...r, side, pair, round, postgresMicros, written, dropped }
  }
}

const percent = (share: number) => `${(share * 100).toFixed(1)} %`
/** A difference with its sign, + or −: the control's sides differ either way. */
const difference = (on: number, off: number) => `${on >= off ? '+' : '−'}${Math.abs(on - off).toFixed(1)}`

function reportProxy(rounds: Round[], connections: number, pins: Pinning | null): void {
  const onRounds = rounds.filter((r) => r.side === 'on')
  const offRounds = rounds.filter((r) => r.side === 'off')
  const off = { ...medianOf(offRounds), side: 'off', pair: '', round: 'median' }
  const on = { ...medianOf(onRounds), side: 'on', pair: '', round: 'median' }
  const medians = [off, on]
  const pairs = Array.from({ length: PAIRS }, (_, i) => ({
    on: onRounds.filter((r) => r.pair === i + 1).map((r) => r.perSecond),
    off: offRounds.filter((r) => r.pair === i + 1).map((r) => r.perSecond),
  }))
  const [ratio, low, high] = pairsRatio(pairs)
  const pairRatios = pairs.map(({ on, off }) => median(on) / median(off))
  // Each round's on over the off run beside it (the same pair's).
  const roundRatios = onRounds.map((r, i) => r.perSecond / offRounds[i]!.perSecond)
  const postgresOff = median(offRounds.map((r) => r.postgresMicros))
  const postgresOn = median(onRounds.map((r) => r.postgresMicros))
  const requestsOn = onRounds.reduce((sum, r) => sum + r.requests, 0)
  const written = onRounds.reduce((sum, r) => sum + r.written, 0)
  const dropped = onRounds.reduce((sum, r) => sum + r.dropped, 0)
  say(
    '',
    `## 1. proxy, log on against off: GET /v1/things/1, ${connections} keep-alive connection(s)${RATE === undefined ? '' : ` at ${fmt(RATE)} requests/s`}; ${PAIRS} pair(s) of gateway processes started in turn, each ${WARMUP_ROUNDS} × ${WARMUP} s per side to warm up, then ${ROUNDS} × ${DURATION} s per side, the order turning each round`,
    `each pair two gateway processes of this build on one database, Redis and upstream: off REQUEST_LOG_RETENTION_DAYS=0, on ${CONTROL ? "0 as well (BENCH_CONTROL=1: the bench's own noise)" : RETENTION_DAYS}`,
    pins === null
      ? 'not pinned: every process wherever the scheduler puts it (BENCH_PIN=1 pins them)'
      : `pinned: the gateways on CPU ${pins.server}; the load, the upstream and the database's backends on CPU ${pins.rest} (Redis and the rest of Postgres wherever the scheduler puts them)`,
    '',
    ...table(
      ['side', 'pair', 'round', ...ROUND_COLUMNS],
      [...rounds, ...medians].map((r) => [r.side, String(r.pair), r.round, ...roundCells(r)]),
      3,
    ),
    '',
    `on / off  req/s ${ratio.toFixed(3)} (target ≥ 0.95: ${ratio >= 0.95 ? 'met' : 'NOT MET'}; the geometric mean of the pairs' ratios of medians; 95 % of resampled pairs and rounds ${low.toFixed(3)}–${high.toFixed(3)}), ` +
      `p50 ${(on.p50 / off.p50).toFixed(3)}, p99 ${(on.p99 / off.p99).toFixed(3)}, CPU/request ${(on.cpuMicros / off.cpuMicros).toFixed(3)}`,
    `          req/s pair by pair: ${pairRatios.map((r) => r.toFixed(3)).join(', ')}`,
    `          req/s round by round (their median ${median(roundRatios).toFixed(3)}, which a drift of the machine between rounds moves least): ${roundRatios
      .map((r) => r.toFixed(3))
      .join(', ')}`,
    `CPU µs/request (medians)  gateway off ${off.cpuMicros.toFixed(1)}, on ${on.cpuMicros.toFixed(1)} (${difference(on.cpuMicros, off.cpuMicros)}); ` +
      `the database's backends off ${postgresOff.toFixed(1)}, on ${postgresOn.toFixed(1)} (${difference(postgresOn, postgresOff)})`,
    `the gateway's main thread, µs/request (medians)  off ${off.mainThreadMicros.toFixed(1)}, on ${on.mainThreadMicros.toFixed(1)} (${difference(on.mainThreadMicros, off.mainThreadMicros)}); ` +
      `of which in the kernel off ${off.mainThreadSystemMicros.toFixed(1)}, on ${on.mainThreadSystemMicros.toFixed(1)} (${difference(on.mainThreadSystemMicros, off.mainThreadSystemMicros)})`,
    `machine idle (medians)  off ${percent(off.idleShare)}, on ${percent(on.idleShare)}; by CPU, off ${off.cpuIdleShares.map(percent).join(' ')}, on ${on.cpuIdleShares.map(percent).join(' ')}`,
    `on's log  ${fmt(written)} records written for ${fmt(requestsOn)} requests of its measured rounds (and their warming requests), ${fmt(dropped)} dropped`,
  )
}

// ---------------------------------------------------------------------------------------------
// 2. One writer's rate: a RequestLogWriter with its defaults, on the gateway's own pool options,
// fed as fast as it takes records (the buffer kept at two batches, so that none is dropped).

async function writerRate(): Promise<void> {
  const db = await createDatabase('request_log_writer')
  const store = await openStore({ databaseUrl: db.url, dataDir: '' })
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} })
  try {
    await ensureRequestLogTable(store.sql)
    const records = makeRecords(WRITER_RECORDS)
    const rows: string[][] = []
    for (let round = 1; round <= WRITER_ROUNDS; round++) {
      checkInterrupted()
      const batches: number[] = []
      let written = 0
      let batchStarted = 0
      const writer = new RequestLogWriter({
        sql: store.sql,
        // As the gateway's (app.ts): the rows as a binary COPY, on a connection of the writer's own.
        openCopyConnection: store.openOwnConnection,
        log: pino({ level: 'warn' }),
        onWritten: (n) => {
          written += n
          batches.push(performance.now() - batchStarted)
          batchStarted = performance.now()
        },
      })
      writer.tableReady = true
      writer.start()
      const [rowsBefore] = await store.sql<
        { n: string }[]
      >`select coalesce(sum(records), 0)::text as n from request_log_rows`
      const backends = await backendsOf(admin, db.name)
      const cpuBefore = process.cpuUsage()
      const postgresBefore = postgresCpu(backends)
      const t0 = performance.now()
      batchStarted = t0
      // Topped up every millisecond: a batch's write takes far longer, so the writer always finds
      // the next batch full, and this loop costs the process little beside the writer's own work.
      for (let next = 0; next < records.length; await sleep(1)) {
        while (next < records.length && writer.buffer.size < 2 * DEFAULT_BATCH_RECORDS)
          for (const end = Math.min(records.length, next + 1000); next < end; next++) writer.add(records[next]!)
        void writer.flush()
      }
      // A failed write is tried again after a pause (writer.ts); a minute of them fails the round.
      for (const deadline = performance.now() + 60_000; written < records.length; await sleep(1)) {
        if (performance.now() > deadline)
          throw new Error(`round ${round}: ${written} of ${records.length} written in time`)
        await writer.flush()
      }
      const seconds = (performance.now() - t0) / 1000
      const cpu = process.cpuUsage(cpuBefore)
      // Backends the pool opened during the round count from 0 (all their time is the round's).
      const postgresSeconds = postgresCpu(await backendsOf(admin, db.name)) - postgresBefore
      await writer.close()
      const [rowsAfter] = await store.sql<
        { n: string }[]
      >`select coalesce(sum(records), 0)::text as n from request_log_rows`
      const counted = Number(rowsAfter!.n) - Number(rowsBefore!.n)
      const sorted = batches.sort((a, b) => a - b)
      rows.push([
        String(round),
        fmt(counted),
        fmt(writer.buffer.dropped),
        seconds.toFixed(2),
        fmt(counted / seconds),
        fmt(batches.length),
        ms(percentile(sorted, 0.5)),
        ms(percentile(sorted, 1)),
        ((cpu.user + cpu.system) / counted).toFixed(1),
        ((postgresSeconds * 1e6) / counted).toFixed(1),
      ])
      console.error(
        `  writer round ${round}: ${fmt(counted)} records in ${seconds.toFixed(2)} s, ${fmt(counted / seconds)}/s`,
      )
      if (counted !== records.length) throw new Error(`round ${round}: ${counted} rows written of ${records.length}`)
    }
    const rates = rows.map((row) => Number(row[4]!.replaceAll(',', '')))
    const rate = median(rates)
    say(
      '',
      `## 2. one writer: ${fmt(WRITER_RECORDS)} records a round into a fresh database's request_log (the table growing round by round), ` +
        `added 1,000 at a time while fewer than ${fmt(2 * DEFAULT_BATCH_RECORDS)} wait; RequestLogWriter's defaults (batches of ${fmt(DEFAULT_BATCH_RECORDS)}), the gateway's pool and COPY connection; ` +
        `timed from the first add to the last batch written, rows counted after`,
      '',
      ...table(
        [
          'round',
          'rows',
          'dropped',
          's',
          'records/s',
          'batches',
          'batch p50 ms',
          'batch max ms',
          'writer CPU µs/record',
          'Postgres CPU µs/record',
        ],
        rows,
      ),
      '',
      `records/s median ${fmt(rate)} (target ≥ 10,000: ${rate >= 10_000 ? 'met' : 'NOT MET'}); ` +
        `at one core for Postgres, its CPU per record would allow ${fmt(1e6 / median(rows.map((row) => Number(row[9]))))}/s`,
    )
  } finally {
    await admin.end()
    await store.close()
    await db.drop()
  }
}

/** The server processes of a database's connections (Postgres runs on this machine). */
async function backendsOf(admin: postgres.Sql, database: string): Promise<number[]> {
  const rows = await admin<{ pid: number }[]>`select pid from pg_stat_activity where datname = ${database}`
  return rows.map((row) => row.pid)
}

/** CPU seconds of those processes, from /proc; a process that has gone counts 0. */
function postgresCpu(pids: number[]): number {
  return pids.reduce((sum, pid) => {
    const seconds = cpuSeconds(pid)
    return sum + (Number.isNaN(seconds) ? 0 : seconds)
  }, 0)
}

/** `n` records as the gateway makes them (request-log/capture.ts): now, of 50 parents' sub-accounts. */
function makeRecords(n: number): RequestRecord[] {
  const uuid = (kind: number, i: number) =>
    `${kind.toString(16).padStart(8, '0')}-0000-4000-8000-${i.toString(16).padStart(12, '0')}`
  const now = Date.now()
  return Array.from({ length: n }, (_, i) => {
    const tenant = (i * 7919) % (SEED_PARENTS * SEED_SUBS)
    const refused = i % 50 === 0
    return {
      // A made id (http/guards.ts): a process's stem and its count.
      id: `0123abcd-0000-4000-8000-${i.toString(16).padStart(12, '0')}`,
      idGiven: false,
      timeMs: now + i / 10,
      accountId: uuid(1, Math.floor(tenant / SEED_SUBS)),
      tenantId: uuid(2, tenant),
      keyId: uuid(3, tenant * SEED_KEYS + (i % SEED_KEYS)),
      method: i % 5 === 0 ? 'POST' : 'GET',
      route: '/v1',
      path: `/v1/things/${i % 1000}`,
      status: refused ? 429 : 200,
      code: refused ? 'rate_limited' : null,
      durationMs: 0.5 + (i % 300) / 10,
      requestBytes: i % 5 === 0 ? 240 : 0,
      responseBytes: 11 + (i % 2000),
      sourceIp: `10.0.${(tenant >> 8) & 255}.${tenant & 255}`,
      cost: 1,
      forwarded: !refused,
      units: null,
    }
  })
}

// ---------------------------------------------------------------------------------------------
// 3. Filtered pages over LOG_ROWS records: seeded in SQL (the indexes dropped while it runs, then
// made again by schema.ts), then GET /v1/sub-accounts/requests through a gateway on that database.

interface Filter {
  name: string
  /** The query string of sample i (after `?`), and what listRequests gets for it. */
  query: (i: number) => string
  filter: (i: number) => Partial<RequestFilter>
  /** A second page: the cursor of the first is fetched untimed. */
  secondPage?: boolean
}

/** A seeded id: md5(kind || n)::uuid in SQL, and the same in Node. */
const seededUuid = (kind: string, n: string) => `md5('${kind}' || ${n})::uuid`
function md5Uuid(text: string): string {
  const hex = createHash('md5').update(text).digest('hex')
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
}

async function filteredPages(): Promise<void> {
  const db = await createDatabase('request_log_query')
  const started: Server[] = []
  // The bench's own connection: index builds get more memory than the server's default 64 MB.
  const sql = postgres(db.url, {
    max: 1,
    onnotice: () => {},
    connection: { maintenance_work_mem: '1GB' },
  })
  try {
    const upstream = await startUpstream()
    started.push(upstream)
    const gateway = await startGateway({
      databaseUrl: db.url,
      upstreamUrl: upstream.url,
      env: { REQUEST_LOG_RETENTION_DAYS: String(RETENTION_DAYS) },
    })
    started.push(gateway)
    const acting = await seedActing(gateway, db.url)
    const parentId = acting.parentId
    const seedSeconds = await seed(sql, parentId)
    const [{ size } = { size: '?' }] = await sql<{ size: string }[]>`
      select pg_size_pretty(sum(pg_total_relation_size(inhrelid))) as size
      from pg_inherits where inhparent = 'request_log_rows'::regclass`
    const [{ rows, parentRows, parentRecords } = { rows: 0, parentRows: 0, parentRecords: 0 }] = await sql<
      { rows: number; parentRows: number; parentRecords: number }[]
    >`select count(*)::int as rows, (count(*) filter (where account_id = ${parentId}))::int as "parentRows",
        (sum(records) filter (where account_id = ${parentId}))::int as "parentRecords" from request_log_rows`
    // The parent's own sub-accounts and keys (seeded tenants 0..SEED_SUBS-1 are its), as seed() made them.
    const subs = Array.from({ length: SEED_SUBS }, (_, i) => md5Uuid(`t${i}`))
    const keys = Array.from({ length: SEED_SUBS }, (_, i) => md5Uuid(`k${i}-${i % SEED_KEYS}`))
    const now = Date.now()
    const day = (d: number) => new Date(now - d * 86_400_000).toISOString()
    const [since, until] = [day(3.5), day(2.5)]
    const filters: Filter[] = [
      { name: 'none', query: () => '', filter: () => ({}) },
      {
        name: 'sub_account_id',
        query: (i) => `sub_account_id=${subs[i % SEED_SUBS]}`,
        filter: (i) => ({ tenantId: subs[i % SEED_SUBS]! }),
      },
      {
        name: 'key_id',
        query: (i) => `key_id=${keys[i % SEED_SUBS]}`,
        filter: (i) => ({ keyId: keys[i % SEED_SUBS]! }),
      },
      { name: 'status=5xx', query: () => 'status=5xx', filter: () => ({ status: { class: 5 } }) },
      { name: 'status=404', query: () => 'status=404', filter: () => ({ status: { exact: 404 } }) },
      { name: 'code=rate_limited', query: () => 'code=rate_limited', filter: () => ({ code: 'rate_limited' }) },
      {
        name: 'since/until, one day',
        query: () => `since=${since}&until=${until}`,
        filter: () => ({ since: new Date(since), until: new Date(until) }),
      },
      {
        name: 'status=2xx & since/until',
        query: () => `status=2xx&since=${since}&until=${until}`,
        filter: () => ({ status: { class: 2 }, since: new Date(since), until: new Date(until) }),
      },
      { name: 'route=management', query: () => 'route=management', filter: () => ({ route: 'management' }) },
      {
        name: 'sub_account_id & status=5xx',
        query: (i) => `sub_account_id=${subs[i % SEED_SUBS]}&status=5xx`,
        filter: (i) => ({ tenantId: subs[i % SEED_SUBS]!, status: { class: 5 } }),
      },
      { name: 'second page (cursor)', query: () => '', filter: () => ({}), secondPage: true },
    ]

    const call = client(gateway.url)
    const headers = { authorization: acting.headers.authorization!, 'x-service-acting-tenant': 'self' }
    const page = async (query: string) =>
      JSON.parse(await call({ method: 'GET', path: `/v1/sub-accounts/requests?${query}`, headers }, 200)) as {
        data: unknown[]
        next_cursor: string | null
      }
    // Pre-flight: each filter's first page (a full one and more at the default 10 million rows).
    for (const f of filters) {
      const first = await page(f.query(0))
      console.error(`  ${f.name}: ${first.data.length} records on the first page, more: ${first.next_cursor !== null}`)
      if (f.secondPage && first.next_cursor === null) throw new Error(`${f.name}: no second page`)
    }
    console.error(`timing ${filters.length} filters, ${QUERY_RUNS} runs each, in turn…`)
    const results = await measureInTurn(
      filters.map((f) => ({
        name: f.name,
        sample: async (i) => {
          let query = f.query(i)
          if (f.secondPage) query = `${query}${query === '' ? '' : '&'}cursor=${(await page(query)).next_cursor}`
          return () => page(query)
        },
      })),
      { n: QUERY_RUNS, warmup: 10 },
    )
    const explained = await explainEach(db.url, parentId, filters)
    for (const [k, f] of filters.entries())
      console.error(
        `\n${f.name}:\n${explained[k]!.custom.plan.join('\n')}\n${explained[k]!.generic.plan.slice(2).join('\n')}`,
      )
    const slowest = results.reduce((a, b) => (b.p99 > a.p99 ? b : a))
    say(
      '',
      `## 3. filtered pages: ${fmt(LOG_ROWS)} records seeded over the last 7 days (${SEED_PARENTS} parents × ${SEED_SUBS} sub-accounts × ${SEED_KEYS} keys, ` +
        `2xx 94 %, 4xx 5 % (404 2.5 %, rate_limited 1 %), 5xx 1 %) in ${seedSeconds.toFixed(0)} s, in ${fmt(rows)} rows of a parent's second each; request_log_rows with its indexes ${size}`,
      `GET /v1/sub-accounts/requests (default limit 20) as the parent with half the records (${fmt(parentRecords)} records in ${fmt(parentRows)} rows), one keep-alive connection, ` +
        `${QUERY_RUNS} runs of each filter in turn after 10 untimed; load average ${os
          .loadavg()
          .map((l) => l.toFixed(2))
          .join(' ')} as it ended`,
      '',
      ...table(
        [
          'filter',
          'p50 ms',
          'p99 ms',
          'EXPLAIN ANALYZE ms: custom / generic plan',
          'buffers hit / read: custom / generic',
        ],
        results.map((r, k) => {
          const { custom, generic } = explained[k]!
          return [
            r.name,
            r.p50.toFixed(2),
            r.p99.toFixed(2),
            `${custom.executionMs.toFixed(2)} / ${generic.executionMs.toFixed(2)}`,
            `${fmt(custom.hit)} / ${fmt(custom.read)}; ${fmt(generic.hit)} / ${fmt(generic.read)}`,
          ]
        }),
      ),
      '',
      `slowest p99: ${slowest.name} ${slowest.p99.toFixed(2)} ms (target ≤ 50 ms: ${slowest.p99 <= 50 ? 'met' : 'NOT MET'}); its plans:`,
      '',
      '```',
      ...explained[results.indexOf(slowest)]!.custom.plan,
      '',
      ...explained[results.indexOf(slowest)]!.generic.plan.slice(2),
      '```',
    )
  } catch (err) {
    if (!isInterrupted()) for (const server of started) console.error(`${server.url} wrote:\n${server.output()}`)
    throw err
  } finally {
    await sql.end()
    for (const server of started.reverse()) await stopChild(server.child).catch((err) => console.error(err))
    await db.drop()
  }
}

/**
 * LOG_ROWS records, oldest first, over the 7 days up to now, in rows as a writer flushing every
 * second makes them (schema.ts): a parent's records of a second in one row, in order, with their
 * made ids. The partitions made first, the indexes dropped and then made again by
 * ensureRequestLogTable once the rows are in, VACUUM ANALYZE last. Tenant t belongs to parent
 * t / SEED_SUBS; parent 0 is the real one (its key reads the API) and has half the records, as a
 * busy parent would; the others share the rest.
 */
async function seed(sql: postgres.Sql, parentId: string): Promise<number> {
  const t0 = performance.now()
  const now = Date.now()
  const start = now - RETENTION_DAYS * 86_400_000
  for (let day = dayOf(start); day <= dayOf(now); day++) await ensurePartition(sql, day)
  const indexes = await sql<{ name: string }[]>`
    select indexrelid::regclass::text as name from pg_index where indrelid = 'request_log_rows'::regclass`
  for (const { name } of indexes) await sql.unsafe(`drop index ${name}`)
  const stepMs = (now - start) / LOG_ROWS
  for (let from = 0; from < LOG_ROWS; from += SEED_CHUNK) {
    checkInterrupted()
    const to = Math.min(LOG_ROWS, from + SEED_CHUNK)
    // h: a hash of the record's number; t its tenant; r picks its status (per mille).
    await sql.unsafe(
      `
      insert into request_log_rows (account_id, first_time, last_time, records, tenant_set, key_set, route_set,
        status_set, code_set, not_2xx, refused_tenant_set, refused_key_set, id_stem, id_low, id_high, ${RECORD_ARRAYS})
      select account_id, to_timestamp(min(time_ms) / 1000), to_timestamp(max(time_ms) / 1000), count(*),
        array_agg(distinct tenant_id), array_agg(distinct key_id), array_agg(distinct route), array_agg(distinct status),
        coalesce(array_agg(distinct code) filter (where code is not null), '{}'), bool_or(status / 100 <> 2),
        coalesce(array_agg(distinct tenant_id) filter (where status / 100 <> 2), '{}'),
        coalesce(array_agg(distinct key_id) filter (where status / 100 <> 2), '{}'),
        '0123abcd-0000-4000-8000-', min(i), max(i),
        array_agg('0123abcd-0000-4000-8000-' || lpad(to_hex(i), 12, '0') order by i), array_agg(round(time_ms * 1000)::int8 order by i),
        array_agg(tenant_id order by i), array_agg(key_id order by i), array_agg(method order by i),
        array_agg(route order by i), array_agg(path order by i), array_agg(status order by i), array_agg(code order by i),
        array_agg(round(duration_ms * 1000)::int8 order by i), array_agg(request_bytes order by i), array_agg(response_bytes order by i),
        array_agg(source_ip order by i)
      from (
        select i, $1::float8 + (i + 0.5) * $2::float8 as time_ms,
          case when t / ${SEED_SUBS} = 0 then $3::uuid else ${seededUuid('a', `(t / ${SEED_SUBS})`)} end as account_id,
          ${seededUuid('t', 't')} as tenant_id, ${seededUuid('k', `t || '-' || (h % ${SEED_KEYS})`)} as key_id,
          case when h % 5 = 0 then 'POST' else 'GET' end as method,
          case when h % 50 = 1 then 'management' else '/v1' end as route,
          '/v1/things/' || (h % 1000) as path,
          (case when r < 940 then (case when h % 5 = 0 then 201 else 200 end)
               when r < 960 then 404 when r < 965 then 404 when r < 970 then 400 when r < 980 then 429
               when r < 983 then 403 when r < 986 then 401 when r < 990 then 409
               when r < 994 then 502 when r < 997 then 503 when r < 999 then 504 else 500 end)::int2 as status,
          case when r < 960 then null when r < 965 then 'route_not_found' when r < 970 then 'validation_failed'
               when r < 980 then 'rate_limited' when r < 983 then 'insufficient_scope' when r < 986 then 'key_expired'
               when r < 990 then null when r < 994 then 'upstream_unavailable' when r < 997 then 'upstream_busy'
               when r < 999 then 'upstream_timeout' else null end as code,
          0.3 + (h % 5000) / 100.0 as duration_ms, case when h % 5 = 0 then 240 else 0 end::int8 as request_bytes,
          (11 + h % 4000)::int8 as response_bytes, '10.0.' || (t / 256 % 256) || '.' || (t % 256) as source_ip
        from (
          select i, h, (h / ${SEED_PARENTS * SEED_SUBS}) % 1000 as r,
            case when half = 0 then h % ${SEED_SUBS} else ${SEED_SUBS} + h % ${(SEED_PARENTS - 1) * SEED_SUBS} end as t
          from (select i, (hashint8(i) & 2147483647)::int8 as h, hashint8(-i - 1) & 1 as half
            from generate_series($4::int8, $5::int8) i) hashed
        ) numbered
      ) records
      group by account_id, floor(time_ms / 1000)
      order by min(i)`,
      [start, stepMs, parentId, from, to - 1],
    )
    console.error(`  seeded ${fmt(to)} / ${fmt(LOG_ROWS)} records, ${((performance.now() - t0) / 1000).toFixed(0)} s`)
  }
  console.error('  making the indexes again (schema.ts)…')
  await ensureRequestLogTable(sql)
  console.error('  VACUUM ANALYZE…')
  for (const { name } of await sql<{ name: string }[]>`
    select inhrelid::regclass::text as name from pg_inherits where inhparent = 'request_log_rows'::regclass`)
    await sql.unsafe(`vacuum analyze ${name}`)
  await sql.unsafe('analyze request_log_rows')
  return (performance.now() - t0) / 1000
}

interface Explained {
  executionMs: number
  hit: number
  read: number
  plan: string[]
}

/** The figures of an EXPLAIN (ANALYZE, BUFFERS): its time and the top node's buffers. */
function explained(plan: string[], head: string[]): Explained {
  const text = plan.join('\n')
  const buffers = /Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?/.exec(text)
  return {
    executionMs: Number(/Execution Time: ([\d.]+) ms/.exec(text)?.[1] ?? Number.NaN),
    hit: Number(buffers?.[1] ?? 0),
    read: Number(buffers?.[2] ?? 0),
    plan: [...head, ...plan],
  }
}

/** The statements of one page as one: their times and buffers added, their plans one after another. */
function summed(parts: Explained[]): Explained {
  return {
    executionMs: parts.reduce((sum, part) => sum + part.executionMs, 0),
    hit: parts.reduce((sum, part) => sum + part.hit, 0),
    read: parts.reduce((sum, part) => sum + part.read, 0),
    plan: parts.flatMap((part, n) => [
      ...(n === 0 ? [] : ['', `-- statement ${n + 1} of ${parts.length}`]),
      ...part.plan,
    ]),
  }
}

/** A parameter as an SQL literal, for EXECUTE (a Date as its ISO text: the column's type reads it). */
function literal(value: unknown): string {
  const text = value instanceof Date ? value.toISOString() : String(value)
  return `'${text.replaceAll("'", "''")}'`
}

/**
 * Each filter's first page (the second for a cursor) as listRequests runs it, under
 * EXPLAIN (ANALYZE, BUFFERS): the statement and its parameters caught by postgres.js's debug hook.
 * Twice: planned for its parameters (custom), and generic, as Postgres may run the gateway's
 * prepared statement after its fifth execution (PREPARE, then EXPLAIN EXECUTE under
 * plan_cache_mode = force_generic_plan).
 */
async function explainEach(
  url: string,
  accountId: string,
  filters: Filter[],
): Promise<{ custom: Explained; generic: Explained }[]> {
  let caught: { query: string; parameters: unknown[] }[] = []
  const traced = postgres(url, {
    max: 1,
    onnotice: () => {},
    connection: { max_parallel_workers_per_gather: '0' },
    debug: (_connection, query, parameters) => {
      caught.push({ query, parameters })
    },
  })
  const none: RequestFilter = {
    ...{ tenantId: null, keyId: null, status: null, code: null, route: null },
    ...{ since: null, until: null, beforeSeq: null, limit: 21 },
  }
  const planOf = (rows: { 'QUERY PLAN': string }[]) => rows.map((row) => row['QUERY PLAN'])
  try {
    const results = []
    for (const [k, f] of filters.entries()) {
      let filter: RequestFilter = { ...none, ...f.filter(0) }
      if (f.secondPage)
        filter = { ...filter, beforeSeq: (await listRequests(traced, accountId, filter)).records[19]!.seq }
      caught = []
      await listRequests(traced, accountId, filter)
      // Every statement of the page (queries.ts reads a page in rounds of two), each explained.
      // Its statements, not the transaction's own (begin, set local, commit).
      const statements = caught.filter(({ query }) => /^\s*(select|with)\b/i.test(query))
      caught = []
      const custom: Explained[] = []
      const generic: Explained[] = []
      for (const [n, { query, parameters }] of statements.entries()) {
        const head = [query.replace(/\s+/g, ' ').trim(), `-- parameters ${JSON.stringify(parameters)}`]
        custom.push(
          explained(
            planOf(
              await traced.unsafe(
                `explain (analyze, buffers) ${query}`,
                parameters as postgres.ParameterOrJSON<never>[],
              ),
            ),
            head,
          ),
        )
        const name = `bench_filter_${k}_${n}`
        const plan = await traced.begin(async (tx) => {
          await tx.unsafe('set local plan_cache_mode = force_generic_plan')
          await tx.unsafe(`prepare ${name} as ${query}`)
          const lines = planOf(
            await tx.unsafe(
              `explain (analyze, buffers) execute ${name}${parameters.length === 0 ? '' : `(${parameters.map(literal).join(', ')})`}`,
            ),
          )
          await tx.unsafe(`deallocate ${name}`)
          return lines
        })
        generic.push(explained(plan, [...head, '-- generic plan']))
      }
      results.push({ custom: summed(custom), generic: summed(generic) })
    }
    return results
  } finally {
    await traced.end()
  }
}

run(main)
