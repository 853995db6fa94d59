// One parent with a long history (BENCH_SUBS sub-accounts × BENCH_PERIODS usage periods, seeded
// with generate_series) floods usage reconciliations at BENCH_FLOOD_RATE a second, inside the
// default management rate of 50/1s, against one gateway replica. Meanwhile another parent's
// management call (GET /v1/sub-accounts) and a warm key's proxied request are timed; the same
// probes are timed without the flood first, in the same run, and the report gives the ratio.
import http from 'node:http'
import { performance } from 'node:perf_hooks'
import postgres from 'postgres'
import { createParentWithKey, mintKey } from '../src/auth/mint.js'
import {
  counts,
  createDatabase,
  envInt,
  ms,
  percentile,
  PROXIED_PATH,
  reportHead,
  request,
  run,
  sleep,
  startGateway,
  startUpstream,
  stopChild,
  table,
} from './lib.js'

const SUBS = envInt('BENCH_SUBS', 3_000)
const PERIODS = envInt('BENCH_PERIODS', 200)
const FLOOD_RATE = envInt('BENCH_FLOOD_RATE', 40)
const PROBES = envInt('BENCH_N', 200)
const PROBE_GAP_MS = 20

interface Probed {
  management: number[]
  proxied: number[]
  failed: Record<string, number>
}

async function probe(agent: http.Agent, base: URL, parentKey: string, warmKey: string): Promise<Probed> {
  const into: Probed = { management: [], proxied: [], failed: {} }
  for (let i = 0; i < PROBES; i++) {
    for (const [kind, path, key] of [
      ['management', '/v1/sub-accounts', parentKey],
      ['proxied', PROXIED_PATH, warmKey],
    ] as const) {
      await sleep(PROBE_GAP_MS)
      const t0 = performance.now()
      const answer = await request(agent, base, { method: 'GET', path, headers: { authorization: `Bearer ${key}` } })
      into[kind].push(performance.now() - t0)
      if (answer.status !== 200)
        into.failed[`${kind} ${answer.status}`] = (into.failed[`${kind} ${answer.status}`] ?? 0) + 1
    }
  }
  return into
}

const p = (times: number[], q: number) =>
  percentile(
    [...times].sort((a, b) => a - b),
    q,
  )

run(async () => {
  const db = await createDatabase('heavy_read_flood')
  const sql = postgres(db.url, { onnotice: () => {}, max: 2 })
  const upstream = await startUpstream()
  const gateway = await startGateway({
    databaseUrl: db.url,
    upstreamUrl: upstream.url,
    env: { MANAGEMENT_RATE: '50/1s' },
  })
  try {
    const [heavy, other] = await Promise.all(
      ['heavy', 'other'].map((name) =>
        sql.begin((tx) => createParentWithKey(tx, { name, externalId: null, extraScopes: [] })),
      ),
    )
    const seedStart = performance.now()
    await sql`insert into tenants (parent_id, name) select ${heavy!.account.id}, 'sub ' || g from generate_series(1, ${SUBS}) g`
    await sql`
      insert into usage_period_units (tenant_id, period_start, meter, units, requests)
      select t.id, date_trunc('hour', now()) - make_interval(hours => g), 'tokens', 100, 10
      from tenants t, generate_series(1, ${PERIODS}) g where t.parent_id = ${heavy!.account.id}`
    const seeded = performance.now() - seedStart
    const sub = await sql`insert into tenants (parent_id, name) values (${other!.account.id}, 'customer') returning id`
    const warm = await mintKey(sql, { tenantId: sub[0]!.id, name: 'warm', scopes: [], withClientSecret: false })
    const agent = new http.Agent({ keepAlive: true, maxSockets: 4 })
    const base = new URL(gateway.url)
    await probe(agent, base, other!.key.apiKey, warm.apiKey) // warm-up
    const quiet = await probe(agent, base, other!.key.apiKey, warm.apiKey)

    let flooding = true
    const flood: Record<string, number> = {}
    const tally = (outcome: string) => {
      flood[outcome] = (flood[outcome] ?? 0) + 1
    }
    const floodAgent = new http.Agent({ keepAlive: true, maxSockets: 64 })
    // At a period's start (USAGE_PERIOD_SECONDS is an hour): the whole seeded history.
    const from = new Date((Math.floor(Date.now() / 3_600_000) - PERIODS) * 3_600_000).toISOString()
    const calls: Promise<void>[] = []
    const floodLoop = (async () => {
      while (flooding) {
        calls.push(
          request(floodAgent, base, {
            method: 'GET',
            path: `/v1/sub-accounts/usage/reconciliation?from=${encodeURIComponent(from)}`,
            headers: { authorization: `Bearer ${heavy!.key.apiKey}` },
          }).then(
            (a) => tally(String(a.status)),
            () => tally('error'),
          ),
        )
        await sleep(1_000 / FLOOD_RATE)
      }
    })()
    await sleep(3_000)
    const flooded = await probe(agent, base, other!.key.apiKey, warm.apiKey)
    flooding = false
    await floodLoop
    await Promise.all(calls)

    const rows = (['management', 'proxied'] as const).map((kind) => [
      kind === 'management' ? "other parent's GET /v1/sub-accounts" : "warm key's proxied GET",
      ms(p(quiet[kind], 0.5)),
      ms(p(quiet[kind], 0.99)),
      ms(p(flooded[kind], 0.5)),
      ms(p(flooded[kind], 0.99)),
      `${(p(flooded[kind], 0.5) / p(quiet[kind], 0.5)).toFixed(2)}×`,
      `${(p(flooded[kind], 0.99) / p(quiet[kind], 0.99)).toFixed(2)}×`,
    ])
    const lines = [
      ...reportHead('bench/heavy-read-flood.ts'),
      `Seeded ${SUBS} sub-accounts × ${PERIODS} periods in ${(seeded / 1000).toFixed(1)} s; flood ${FLOOD_RATE}/s of reconciliations; ${PROBES} probes of each kind a phase.`,
      '',
      ...table(['probe (ms)', 'quiet p50', 'quiet p99', 'flood p50', 'flood p99', 'p50 ratio', 'p99 ratio'], rows),
      '',
      `Flood answers: ${counts(flood)}. Probe failures: quiet ${counts(quiet.failed) || 'none'}, flood ${counts(flooded.failed) || 'none'}.`,
    ]
    console.log(lines.join('\n'))
    agent.destroy()
    floodAgent.destroy()
  } finally {
    await stopChild(gateway.child)
    await stopChild(upstream.child)
    await sql.end({ timeout: 1 })
    await db.drop()
  }
})
