// Scale: how the gateway's cost grows with its data. For each of BENCH_SCALES sub-accounts under
// one parent (bench/seed.ts: 10 keys each, 30 days of usage), latencies of management and proxied
// requests in each cache state on a gateway built in this process; at the largest scale, the
// proxy ratio of bench:proxy on that data and the RSS of a gateway process while a million
// distinct keys are used once each. bench/README.md: how, the knobs.
import { resolve } from 'node:path'
import type { FastifyInstance } from 'fastify'
import { Redis } from '../src/cache/ioredis.js'
import postgres from 'postgres'
import { buildApp } from '../src/app.js'
import { loadConfig } from '../src/config.js'
import { openStore } from '../src/store/db.js'
import {
  checkInterrupted,
  client,
  type Call,
  createDatabase,
  deleteRedisPrefix,
  ENCRYPTION_KEY,
  envInt,
  fmt,
  type Gateway,
  load,
  type Measured,
  median,
  medianOf,
  measureInTurn,
  metric,
  type Op,
  type OpResult,
  percentile,
  REDIS_URL,
  reportHead,
  ROOT,
  ROUND_COLUMNS,
  roundCells,
  rssBytes,
  run,
  scrape,
  sleep,
  startBare,
  startGateway,
  startUpstream,
  stopChild,
  table,
} from './lib.js'
import { extIdOf, isSeededDeactivated, keyDigest, keyFor, seed, type Seeded, subIdOf } from './seed.js'

const SCALES = (process.env.BENCH_SCALES || '1000,10000,100000')
  .split(',')
  .map((s) => {
    const n = Number(s)
    if (!Number.isSafeInteger(n) || n < 1000) throw new Error(`BENCH_SCALES: whole numbers ≥ 1000, got "${s}"`)
    return n
  })
  .sort((a, b) => a - b)
const N = envInt('BENCH_N', 2000)
const PROXY_ROUNDS = envInt('BENCH_PROXY_ROUNDS', 2, 0)
const MEMORY_KEYS = envInt('BENCH_MEMORY_KEYS', 1_000_000, 0)
const KEYS_PER_SUB = 10
const USAGE_DAYS = 30
const day = (msAgo: number) => new Date(Date.now() - msAgo).toISOString().slice(0, 10)
const DAY = 86_400_000

// ---------------------------------------------------------------------------------------------
// One scale.

interface ScaleRun {
  scale: number
  seeded: Seeded
  results: OpResult[]
  walk: { pages: number; p50: number; p99: number; firstWalkSeconds: number }
}

async function runScale(
  scale: number,
  upstreamUrl: string,
): Promise<ScaleRun & { url: string; drop: () => Promise<void> }> {
  const db = await createDatabase(`scale_${scale}`)
  console.error(`\n== ${fmt(scale)} sub-accounts (${db.name}) ==`)
  const range = { from: day((USAGE_DAYS - 1) * DAY), to: day(0) }
  // A month a year back, in which no sub-account has usage.
  const empty = { from: day(400 * DAY), to: day(371 * DAY) }
  const sql = postgres(db.url, { max: 2, onnotice: () => {} })
  const seeded = await seed(sql, {
    seed: db.name,
    subAccounts: scale,
    keysPerSub: KEYS_PER_SUB,
    usageDays: USAGE_DAYS,
  })
    .catch(async (err) => {
      await db.drop()
      throw err
    })
    .finally(() => sql.end())
  // bench/seed.ts gives every sub-account usage but those with i % 10 = 0.
  const withUsage = scale - Math.ceil(scale / 10)
  const positions = {
    listMiddle: Math.floor(scale / 2),
    listLast: scale - 20,
    usageMiddle: Math.floor(withUsage / 2),
    usageLast: withUsage - 20,
  }
  const { parentId } = seeded
  // The gateway, in this process, with a Redis key prefix of its own.
  const prefix = `tgwscale:${db.name}:`
  const store = await openStore({ databaseUrl: db.url, dataDir: '/nonexistent' })
  const config = loadConfig(
    {
      // Measured one request after another, far beyond the default 50 a second per parent.
      MANAGEMENT_RATE: '1000000000/1s',
      DATABASE_URL: db.url,
      ENCRYPTION_KEY,
      REDIS_URL,
      REDIS_KEY_PREFIX: prefix,
      UPSTREAM_URL: upstreamUrl,
      LOG_LEVEL: 'warn',
      GATEWAY_CONFIG: resolve(ROOT, 'config/gateway.yaml'),
    },
    ROOT,
  )
  const redis = new Redis(REDIS_URL)
  let app: FastifyInstance | null = null
  try {
    app = await buildApp({ config, store, redisKeyPrefix: prefix })
    const c = client(await app.listen({ host: '127.0.0.1', port: 0 }))
    const gateway = app
    // Ready once Postgres answers; the cache states measured below need Redis connected too.
    const readyz = `http://127.0.0.1:${(app.server.address() as { port: number }).port}/readyz`
    while (((await (await fetch(readyz)).json()) as { checks?: { redis?: string } }).checks?.redis !== 'ok')
      await sleep(100)
    const auth = { authorization: `Bearer ${seeded.parentKey}` }
    const get = (path: string, headers: Record<string, string> = auth): Call => ({ method: 'GET', path, headers })
    const usagePath = (r: { from: string; to: string }, limit: number, cursor = '') =>
      `/v1/sub-accounts/usage?from=${r.from}&to=${r.to}&limit=${limit}${cursor && `&cursor=${cursor}`}`

    // The cursor after the first `n` entries of a listing, walked by next_cursor.
    const cursorAfter = async (path: (limit: number, cursor: string) => string, n: number) => {
      let cursor = ''
      for (let walked = 0; walked < n; walked += 100) {
        cursor = (JSON.parse(await c(get(path(Math.min(100, n - walked), cursor)), 200)) as { next_cursor: string })
          .next_cursor
      }
      return cursor
    }
    const listPath = (limit: number, cursor: string) =>
      `/v1/sub-accounts?limit=${limit}${cursor && `&cursor=${cursor}`}`
    const cursors = {
      listMiddle: await cursorAfter(listPath, positions.listMiddle),
      listLast: await cursorAfter(listPath, positions.listLast),
      usageMiddle: await cursorAfter((limit, cursor) => usagePath(range, limit, cursor), positions.usageMiddle),
      usageLast: await cursorAfter((limit, cursor) => usagePath(range, limit, cursor), positions.usageLast),
    }
    const last = JSON.parse(await c(get(listPath(20, cursors.listLast)), 200)) as {
      data: { external_id: string }[]
      next_cursor: string | null
    }
    if (last.data.length !== 20 || last.next_cursor !== null || last.data[19]!.external_id !== extIdOf(scale - 1))
      throw new Error('the last list page is not the last 20 sub-accounts')

    // The whole usage report, 100 a page by next_cursor, before the acting requests below add usage
    // for today; walked again until BENCH_N / 2 pages (or two minutes) were timed.
    console.error('  walking the usage report…')
    const pageTimes: number[] = []
    let firstWalkSeconds = 0
    const walkStarted = performance.now()
    while (pageTimes.length < N / 2 && performance.now() - walkStarted < 120_000) {
      let cursor = ''
      const t0 = performance.now()
      do {
        checkInterrupted()
        const t1 = performance.now()
        cursor =
          (JSON.parse(await c(get(usagePath(range, 100, cursor)), 200)) as { next_cursor: string | null })
            .next_cursor ?? ''
        pageTimes.push(performance.now() - t1)
      } while (cursor !== '')
      firstWalkSeconds ||= (performance.now() - t0) / 1000
    }
    const sortedPages = pageTimes.sort((a, b) => a - b)

    // The Redis entries a sample deletes to leave Postgres to answer, named as the cache names them
    // (src/cache); checked once here, since a renamed entry would leave Redis serving.
    const entry = {
      key: (digest: Buffer) => `${prefix}key:${digest.toString('hex')}`,
      tenant: (id: string) => `${prefix}tenant:${id}`,
      sub: (id: string) => `${prefix}sub:${parentId}:${id}`,
      ext: (ext: string) => `${prefix}ext:${parentId}:${ext}`,
      anyActive: `${prefix}anyActive:${parentId}`,
    }
    const cache = gateway.tenancyCache
    // clearLocal() distrusts entries stored up to its millisecond: wait for the next one, so that
    // what a sample stores right after is trusted.
    const clearLocal = () => {
      cache.clearLocal()
      const at = Date.now()
      while (Date.now() === at) {}
    }
    const request =
      (call: Call, status = 200) =>
      async () =>
        c(call, status)
    const randomSub = () => Math.floor(Math.random() * scale)
    const activeSub = (): number => {
      const i = randomSub()
      return isSeededDeactivated(i) ? activeSub() : i
    }
    // A sample before may have left the in-process cache untrusted: the parent's key and record
    // back in it, so that a "warm" request finds them there.
    const warmParent = async () => {
      await cache.lookups.keyByDigest(keyDigest(seeded.parentKey))
      await cache.lookups.tenant(parentId)
    }
    const warm =
      (call: () => Call, status = 200) =>
      async () => {
        await warmParent()
        return request(call(), status)
      }
    const acting = (i: number, by: 'uuid' | 'ext') =>
      get(PROXIED, { ...auth, 'x-service-acting-tenant': by === 'uuid' ? subIdOf(db.name, i) : `ext:${extIdOf(i)}` })
    // Keys never used before, from four disjoint quarters of the seeded ones, hopping across the index.
    const quarter = Math.floor((scale * KEYS_PER_SUB) / 4)
    const keyOf = (part: number, i: number) => part * quarter + spread(quarter)(i % quarter)
    const found = (digest: Buffer) => async () => {
      if ((await cache.lookups.keyByDigest(digest)) === null) throw new Error('a seeded key was not found')
    }
    const created: string[] = []
    const usageSamples = Math.max(100, Math.floor(N / 4))
    const ops: Op[] = [
      { name: 'baseline: GET /healthz', sample: async () => request(get('/healthz', {})) },
      { name: 'get', sample: warm(() => get(`/v1/sub-accounts/${subIdOf(db.name, randomSub())}`)) },
      { name: 'list, first page', sample: warm(() => get(listPath(20, ''))) },
      { name: 'list, middle page', sample: warm(() => get(listPath(20, cursors.listMiddle))) },
      { name: 'list, last page', sample: warm(() => get(listPath(20, cursors.listLast))) },
      {
        name: 'keys of a sub-account',
        sample: warm(() => get(`/v1/sub-accounts/${subIdOf(db.name, randomSub())}/api-keys`)),
      },
      {
        name: 'usage (30 days, 20/page), first page',
        count: usageSamples,
        sample: warm(() => get(usagePath(range, 20))),
      },
      {
        name: 'usage, middle page',
        count: usageSamples,
        sample: warm(() => get(usagePath(range, 20, cursors.usageMiddle))),
      },
      {
        name: 'usage, last page',
        count: usageSamples,
        sample: warm(() => get(usagePath(range, 20, cursors.usageLast))),
      },
      { name: 'usage, a month without usage', count: usageSamples, sample: warm(() => get(usagePath(empty, 20))) },
      ...(['uuid', 'ext'] as const).flatMap((by): Op[] => [
        {
          name: `act by ${by}: all in-process (warm)`,
          sample: async () => {
            const i = activeSub()
            await c(acting(i, by), 200)
            return request(acting(i, by))
          },
        },
        {
          name: `act by ${by}: in-process cold, Redis serves`,
          sample: async () => {
            const i = activeSub()
            clearLocal()
            await c(acting(i, by), 200)
            clearLocal()
            return request(acting(i, by))
          },
        },
        {
          name: `act by ${by}: in-process and Redis cold, Postgres serves`,
          sample: async () => {
            const i = activeSub()
            clearLocal()
            await redis.del(
              entry.key(keyDigest(seeded.parentKey)),
              entry.tenant(parentId),
              entry.sub(subIdOf(db.name, i)),
              entry.ext(extIdOf(i)),
            )
            return request(acting(i, by))
          },
        },
      ]),
      {
        name: 'never-seen sub-account key (key and tenant from Postgres)',
        sample: async (i) => {
          const n = keyOf(0, i)
          const sub = Math.floor(n / KEYS_PER_SUB)
          clearLocal()
          await redis.del(entry.key(keyDigest(keyFor(db.name, n))), entry.tenant(subIdOf(db.name, sub)))
          return request(
            get(PROXIED, { authorization: `Bearer ${keyFor(db.name, n)}` }),
            isSeededDeactivated(sub) ? 403 : 200,
          )
        },
      },
      {
        name: 'lookup alone: keyByDigest, Redis serves',
        sample: async (i) => {
          const digest = keyDigest(keyFor(db.name, keyOf(1, i)))
          await found(digest)()
          clearLocal()
          return found(digest)
        },
      },
      {
        name: 'lookup alone: keyByDigest, never seen (Redis miss, then Postgres)',
        sample: async (i) => {
          const digest = keyDigest(keyFor(db.name, keyOf(2, i)))
          clearLocal()
          return found(digest)
        },
      },
      {
        // A parent's write without the acting header is refused while it has an active
        // sub-account (docs/api.md); whether it has one is a cached lookup, here from Postgres.
        name: 'write without acting header, any-active from Postgres (400)',
        sample: async () => {
          await redis.del(entry.anyActive)
          clearLocal()
          await warmParent()
          return request({ method: 'POST', path: PROXIED, headers: auth }, 400)
        },
      },
      {
        name: 'create',
        sample: (i) =>
          warm(
            () => ({
              method: 'POST',
              path: '/v1/sub-accounts',
              headers: { ...auth, 'x-service-acting-tenant': 'self' },
              body: JSON.stringify({ name: `new ${i}`, external_id: `new-${i}` }),
            }),
            201,
          )().then((timed) => async () => created.push((JSON.parse(await timed()) as { id: string }).id)),
      },
      // The sub-account the create of this round made.
      {
        name: 'deactivate',
        sample: (i) =>
          warm(() => ({
            method: 'POST',
            path: `/v1/sub-accounts/${created[i]}/deactivate`,
            headers: { ...auth, 'x-service-acting-tenant': 'self' },
          }))(),
      },
    ]
    // Untimed: JIT, the pools' connections, plan caches.
    for (let i = 0; i < 300; i++) await c(acting(activeSub(), i % 2 === 0 ? 'uuid' : 'ext'), 200)
    console.error(`  measuring ${ops.length} operations in turn, ${N} samples each…`)
    const lookups = gateway.metrics.registry.getSingleMetric('tgw_store_lookups_total') as unknown as {
      get(): Promise<{ values: { labels: { tier?: string }; value: number }[] }>
    }
    const probe = async () => {
      const { values } = await lookups.get()
      return ['redis', 'postgres'].map((tier) => values.find((v) => v.labels.tier === tier)?.value ?? 0)
    }
    const results = await measureInTurn(ops, { n: N, warmup: 100, probe })
    return {
      scale,
      seeded,
      results,
      walk: {
        pages: pageTimes.length,
        p50: percentile(sortedPages, 0.5),
        p99: percentile(sortedPages, 0.99),
        firstWalkSeconds,
      },
      url: db.url,
      drop: db.drop,
    }
  } catch (err) {
    await db.drop()
    throw err
  } finally {
    await app?.close()
    await store.close()
    redis.disconnect()
    await deleteRedisPrefix(prefix)
  }
}

const PROXIED = '/v1/things/1'

/** A permutation of 0..size-1 by a stride coprime to size, so that neighbours are far apart. */
function spread(size: number): (i: number) => number {
  const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b))
  let stride = Math.max(1, Math.floor(size * 0.618))
  while (gcd(stride, size) !== 1) stride++
  return (i) => (i * stride) % size
}

// ---------------------------------------------------------------------------------------------
// At the largest scale, gateway processes on the seeded database.

type ProxySide = 'bare' | 'gateway' | 'gateway, spread'

/**
 * bench:proxy's comparison on the seeded data: the parent acting as one sub-account, and as a third
 * side acting as every active sub-account in turn, so that the caches hold a working set of the data's size.
 */
async function proxyRatio(url: string, seeded: Seeded, upstreamUrl: string): Promise<string[]> {
  console.error(`\n  proxy ratio: ${PROXY_ROUNDS} × 10 s per side…`)
  const bare = await startBare(upstreamUrl)
  const gateway = await startGateway({
    databaseUrl: url,
    upstreamUrl,
    env: { REDIS_KEY_PREFIX: `tgwscale:proxy:${seeded.seed}:` },
  })
  try {
    const auth = { authorization: `Bearer ${seeded.parentKey}` }
    const active = Array.from({ length: seeded.subAccounts }, (_, i) => i).filter((i) => !isSeededDeactivated(i))
    let next = 0
    const sides: {
      name: ProxySide
      server: { url: string; child: { pid?: number | undefined } }
      headers: Record<string, string>
      vary?: () => Record<string, string>
    }[] = [
      { name: 'bare', server: bare, headers: { ...auth, 'x-service-acting-tenant': `ext:${extIdOf(1)}` } },
      { name: 'gateway', server: gateway, headers: { ...auth, 'x-service-acting-tenant': `ext:${extIdOf(1)}` } },
      {
        name: 'gateway, spread',
        server: gateway,
        headers: auth,
        vary: () => ({ 'x-service-acting-tenant': `ext:${extIdOf(active[next++ % active.length]!)}` }),
      },
    ]
    const rounds: (Measured & { side: ProxySide; round: string; lookups: string })[] = []
    for (let r = 0; r <= PROXY_ROUNDS; r++) {
      for (const side of sides) {
        await sleep(500)
        const before = await scrape(gateway.metricsPort)
        const m = await load({
          url: side.server.url,
          headers: side.headers,
          connections: 50,
          seconds: r === 0 ? 2 : 10,
          pid: side.server.child.pid,
          ...(side.vary ? { vary: side.vary } : {}),
        })
        const after = await scrape(gateway.metricsPort)
        const perRequest = (tier: string) =>
          (
            (metric(after, 'tgw_store_lookups_total', `tier="${tier}"`) -
              metric(before, 'tgw_store_lookups_total', `tier="${tier}"`)) /
            m.requests
          ).toFixed(3)
        if (r > 0)
          rounds.push({
            ...m,
            side: side.name,
            round: String(r),
            lookups: side.name === 'bare' ? '' : `${perRequest('redis')} + ${perRequest('postgres')}`,
          })
      }
    }
    const medians = sides.map(({ name }) => ({
      ...medianOf(rounds.filter((r) => r.side === name)),
      side: name,
      round: 'median',
      lookups: '',
    }))
    const bareMedian = medians[0]!
    return [
      `proxy ratio at ${fmt(seeded.subAccounts)} sub-accounts: GET ${PROXIED}, 50 connections, ${PROXY_ROUNDS} × 10 s per side after 2 s each; "gateway": the parent acting as ext:${extIdOf(1)}; "spread": as every active sub-account in turn`,
      ...table(
        ['side', 'round', ...ROUND_COLUMNS, 'Redis + Postgres lookups/req'],
        [...rounds, ...medians].map((r) => [r.side, r.round, ...roundCells(r), r.lookups]),
        2,
      ),
      ...medians
        .slice(1)
        .map(
          (g) =>
            `${g.side} / bare: req/s ${(g.perSecond / bareMedian.perSecond).toFixed(3)}, CPU/request ${(g.cpuMicros / bareMedian.cpuMicros).toFixed(3)} (medians)`,
        ),
    ]
  } finally {
    await stopChild(gateway.child)
    await stopChild(bare.child)
    await deleteRedisPrefix(`tgwscale:proxy:${seeded.seed}:`)
  }
}

/** RSS of a gateway process, as the image runs it, while seeded keys are used once each in an order that hops across the index. */
async function memory(url: string, seeded: Seeded, upstreamUrl: string): Promise<string[]> {
  const keys = Math.min(MEMORY_KEYS, seeded.subAccounts * seeded.keysPerSub)
  console.error(`\n  memory: ${fmt(keys)} distinct keys…`)
  const prefix = `tgwscale:memory:${seeded.seed}:`
  const gateway: Gateway = await startGateway({ databaseUrl: url, upstreamUrl, env: { REDIS_KEY_PREFIX: prefix } })
  try {
    const order = spread(seeded.subAccounts * seeded.keysPerSub)
    let [sent, answered] = [0, 0]
    const samples: { t: number; keys: number; rss: number; heap: number; lagMax: number }[] = []
    const started = performance.now()
    const sample = async () => {
      const m = await scrape(gateway.metricsPort)
      const s = {
        t: (performance.now() - started) / 1000,
        keys: answered,
        rss: rssBytes(gateway.child.pid) / 2 ** 20,
        heap: metric(m, 'nodejs_heap_size_used_bytes') / 2 ** 20,
        lagMax: metric(m, 'nodejs_eventloop_lag_max_seconds') * 1000,
      }
      samples.push(s)
      if (samples.length % 10 === 0)
        console.error(`    ${s.t.toFixed(0)} s: ${fmt(s.keys)} keys, RSS ${s.rss.toFixed(0)} MiB`)
    }
    await sample()
    const timer = setInterval(() => void sample(), 2000)
    // 1 in 100 keys belongs to a deactivated sub-account: 403 is expected.
    const m = await load({
      url: gateway.url,
      headers: {},
      connections: 32,
      amount: keys,
      pid: gateway.child.pid,
      allowed: [200, 403],
      vary: () => ({ authorization: `Bearer ${keyFor(seeded.seed, order(sent++))}` }),
      onResponse: () => answered++,
    }).finally(() => clearInterval(timer))
    // Ten seconds idle: does RSS come down once the load stops?
    for (let i = 0; i < 5; i++) await sleep(2000).then(sample)
    const peak = Math.max(...samples.map((s) => s.rss))
    const full = samples.filter((s) => s.keys >= 150_000)
    const lags = samples.map((s) => s.lagMax).filter((l) => !Number.isNaN(l))
    const every = Math.max(1, Math.ceil(samples.length / 30))
    return [
      `memory: ${gateway.command}; ${fmt(m.requests)} requests, each with a seeded key not used before, 32 connections; ${m.cpuMicros.toFixed(0)} µs CPU per request; statuses ${JSON.stringify(m.statuses)}`,
      ...table(
        ['t s', 'distinct keys used', 'RSS MiB', 'V8 heap used MiB', 'event-loop delay max ms'],
        samples
          .filter((_, i) => i % every === 0 || i === samples.length - 1)
          .map((s) => [s.t.toFixed(0), fmt(s.keys), s.rss.toFixed(1), s.heap.toFixed(1), fmt(s.lagMax)]),
      ),
      `peak RSS ${peak.toFixed(1)} MiB (target ≤ 256: ${peak <= 256 ? 'met' : 'NOT MET'})` +
        (full.length > 0
          ? `; once 150,000 keys were used (the in-process LRU full): ${Math.min(...full.map((s) => s.rss)).toFixed(0)}–${Math.max(...full.map((s) => s.rss)).toFixed(0)} MiB, V8 heap at its lowest ${Math.min(...full.map((s) => s.heap)).toFixed(0)} MiB`
          : '') +
        `; event-loop delay per 2 s, median ${fmt(median(lags))} ms, max ${fmt(Math.max(...lags))} ms`,
    ]
  } finally {
    await stopChild(gateway.child)
    await deleteRedisPrefix(prefix)
  }
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const upstream = await startUpstream()
  const runs: ScaleRun[] = []
  const atLargest: string[] = []
  try {
    for (const scale of SCALES) {
      const done = await runScale(scale, upstream.url)
      runs.push(done)
      try {
        if (scale === SCALES.at(-1)) {
          if (PROXY_ROUNDS > 0) atLargest.push('', ...(await proxyRatio(done.url, done.seeded, upstream.url)))
          if (MEMORY_KEYS > 0) atLargest.push('', ...(await memory(done.url, done.seeded, upstream.url)))
        }
      } finally {
        await done.drop()
      }
    }
  } finally {
    await stopChild(upstream.child)
  }
  const [first, largest] = [runs[0]!, runs.at(-1)!]
  const k = (r: ScaleRun) => `${r.scale / 1000}k`
  console.log(
    [
      ...reportHead('bench:scale'),
      `setup     one parent; ${KEYS_PER_SUB} keys per sub-account; ${USAGE_DAYS} days of usage for 9 in 10 sub-accounts; 1 in 100 deactivated`,
      `          latencies: one request at a time over one keep-alive socket to a gateway built in this process (buildApp), ${N} timed samples`,
      '          per operation after 100 untimed, in turn, the cache state of each prepared untimed; ms',
      '',
      'seeding, s:',
      ...table(
        ['phase', ...runs.map(k)],
        Object.keys(first.seeded.timings).map((phase) => [
          phase,
          ...runs.map((r) => r.seeded.timings[phase]!.toFixed(1)),
        ]),
      ),
      '',
      ...table(
        [
          'operation',
          ...runs.flatMap((r) => [`${k(r)} p50`, `${k(r)} p99`]),
          `p50 ${k(largest)}/${k(first)}`,
          'Redis + PG lookups/req',
        ],
        [
          ...largest.results.map((result, i) => [
            result.name,
            ...runs.flatMap((r) => [r.results[i]!.p50.toFixed(3), r.results[i]!.p99.toFixed(3)]),
            (result.p50 / first.results[i]!.p50).toFixed(2),
            result.perSample.map((v) => v.toFixed(1)).join(' + '),
          ]),
          [
            'usage report walked, 100/page, per page',
            ...runs.flatMap((r) => [r.walk.p50.toFixed(3), r.walk.p99.toFixed(3)]),
            (largest.walk.p50 / first.walk.p50).toFixed(2),
            '',
          ],
        ],
      ),
      `usage walk: ${runs.map((r) => `${k(r)} one walk ${r.walk.firstWalkSeconds.toFixed(1)} s, ${r.walk.pages} pages timed`).join('; ')}`,
      ...atLargest,
    ].join('\n'),
  )
}

run(main)
