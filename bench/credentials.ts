// Throughput of a proxied request authenticated by an access token against the same request by
// the key the token was issued to, on one gateway in front of the real upstream, in the same run;
// and how many signature checks a warm token costs per request (from the gateway's /metrics: it
// should be none). bench/README.md says what it starts, what it prints and its knobs.
import {
  createDatabase,
  envInt,
  fmt,
  type Gateway,
  gitDescription,
  isInterrupted,
  load,
  type Measured,
  medianOf,
  metric,
  REDIS_URL,
  reportHead,
  ROUND_COLUMNS,
  roundCells,
  roundLine,
  run,
  runCli,
  scrape,
  type Server,
  sleep,
  startGateway,
  startUpstream,
  stopChild,
  table,
} from './lib.js'

const DURATION = envInt('BENCH_DURATION', 5)
const CONNECTIONS = envInt('BENCH_CONNECTIONS', 50)
const ROUNDS = envInt('BENCH_ROUNDS', 6)
const WARMUP = envInt('BENCH_WARMUP', 5)
const WARMUP_ROUNDS = envInt('BENCH_WARMUP_ROUNDS', 2)
/** The token must outlive the run: the longest lifetime there is. */
const TOKEN_TTL_SECONDS = 3600

type SideName = 'key' | 'token'
interface Side {
  name: SideName
  headers: Record<string, string>
}
interface Round extends Measured {
  side: SideName
  round: string
}
/** What the gateway's metrics moved by over one side's measured rounds. */
interface Costs {
  verifications: number
  signatures: number
  waited: number
  postgres: number
  /** Requests admitted from the proxy's memory of the last second's admissions. */
  remembered: number
}

async function json(response: Response, what: string): Promise<Record<string, unknown>> {
  const body = (await response.json()) as Record<string, unknown>
  if (!response.ok) throw new Error(`${what} answered ${response.status}: ${JSON.stringify(body)}`)
  return body
}

/** A parent (by the CLI), a sub-account and a key of it (by the API), and a token for that key. */
async function seed(gateway: Gateway, databaseUrl: string): Promise<{ key: string; token: string; keyId: string }> {
  const parent = JSON.parse(
    await runCli(['accounts', 'create', '--name', 'bench'], { DATABASE_URL: databaseUrl, REDIS_URL }),
  ) as { api_key: string }
  const manage = { authorization: `Bearer ${parent.api_key}`, 'content-type': 'application/json' }
  const sub = await json(
    await fetch(`${gateway.url}/v1/sub-accounts`, { method: 'POST', headers: manage, body: '{"name":"bench-sub"}' }),
    'POST /v1/sub-accounts',
  )
  const key = await json(
    await fetch(`${gateway.url}/v1/sub-accounts/${sub.id}/api-keys`, {
      method: 'POST',
      headers: { ...manage, 'x-service-acting-tenant': 'self' },
      body: JSON.stringify({ name: 'bench', scopes: ['things:read', 'things:write'] }),
    }),
    'POST …/api-keys',
  )
  const token = await json(
    await fetch(`${gateway.url}/oauth2/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: String(key.id),
        client_secret: String(key.client_secret),
      }),
    }),
    'POST /oauth2/token',
  )
  return { key: String(key.api_key), token: String(token.access_token), keyId: String(key.id) }
}

async function main(): Promise<void> {
  const db = await createDatabase('credentials')
  const started: Server[] = []
  try {
    const upstream = await startUpstream()
    started.push(upstream)
    const gateway = await startGateway({
      databaseUrl: db.url,
      upstreamUrl: upstream.url,
      env: { ACCESS_TOKEN_TTL_SECONDS: String(TOKEN_TTL_SECONDS) },
    })
    started.push(gateway)
    const credentials = await seed(gateway, db.url)
    const sides: Side[] = [
      { name: 'key', headers: { authorization: `Bearer ${credentials.key}` } },
      { name: 'token', headers: { authorization: `Bearer ${credentials.token}` } },
    ]

    // Pre-flight: both reach the upstream, which is told the same identity for each.
    const seen: Record<string, string>[] = []
    for (const side of sides) {
      const response = await fetch(`${gateway.url}/v1/things/echo`, { headers: side.headers })
      const headers = (await json(response, `${side.name}: GET /v1/things/echo`)) as Record<string, string>
      seen.push(Object.fromEntries(Object.entries(headers).filter(([name]) => name.startsWith('x-service-'))))
    }
    if (JSON.stringify(seen[0]) !== JSON.stringify(seen[1]) || seen[0]!['x-service-key-id'] !== credentials.keyId)
      throw new Error(
        `the upstream saw ${JSON.stringify(seen[0])} for the key, ${JSON.stringify(seen[1])} for the token`,
      )

    const measure = async (side: Side, seconds: number, round: string): Promise<Round> => {
      await sleep(500)
      const r = await load({
        url: gateway.url,
        headers: side.headers,
        connections: CONNECTIONS,
        seconds,
        pid: gateway.child.pid,
      })
      console.error(roundLine(`${side.name} ${round}`, r))
      return { ...r, side: side.name, round }
    }
    console.error(`warming up, ${WARMUP_ROUNDS} × ${WARMUP} s per side…`)
    for (let pass = 1; pass <= WARMUP_ROUNDS; pass++)
      for (const side of sides) await measure(side, WARMUP, `warm-up ${pass}`)

    console.error(`measuring, ${ROUNDS} × ${DURATION} s per side…`)
    const rounds: Round[] = []
    const costs = new Map<SideName, Costs>()
    for (let r = 1; r <= ROUNDS; r++) {
      // Alternating, and the second side first every other round, so that neither always follows the other.
      for (const side of r % 2 === 1 ? sides : [...sides].reverse()) {
        // One request warms the caches again after the other side's round (longer than their TTL).
        await fetch(`${gateway.url}/v1/things/1`, { headers: side.headers }).then((res) => res.text())
        const before = await scrape(gateway.metricsPort)
        rounds.push(await measure(side, DURATION, String(r)))
        const after = await scrape(gateway.metricsPort)
        const delta = (name: string, ...labels: string[]) =>
          metric(after, name, ...labels) - metric(before, name, ...labels)
        const sum = costs.get(side.name) ?? { verifications: 0, signatures: 0, waited: 0, postgres: 0, remembered: 0 }
        sum.verifications += delta('tgw_token_verifications_total')
        sum.signatures += delta('tgw_signatures_total')
        sum.waited += delta('tgw_cache_misses_total', 'tier="local"')
        sum.postgres += delta('tgw_store_lookups_total', 'tier="postgres"')
        sum.remembered += delta('tgw_recent_admissions_total')
        costs.set(side.name, sum)
      }
    }
    report(rounds, costs, started)
  } catch (err) {
    if (!isInterrupted()) for (const server of started) console.error(`${server.url} wrote:\n${server.output()}`)
    throw err
  } finally {
    for (const server of started.reverse()) await stopChild(server.child).catch((err) => console.error(err))
    await db.drop()
  }
}

function report(rounds: Round[], costs: Map<SideName, Costs>, started: Server[]): void {
  const of = (side: SideName) => rounds.filter((r) => r.side === side).sort((a, b) => Number(a.round) - Number(b.round))
  const key = { ...medianOf(of('key')), side: 'key' as const, round: 'median' }
  const token = { ...medianOf(of('token')), side: 'token' as const, round: 'median' }
  const ratio = token.perSecond / key.perSecond
  const tokenCosts = costs.get('token')!
  const perRequest = tokenCosts.verifications / token.requests
  const lines = [
    ...reportHead('bench:credentials'),
    `load      GET /v1/things/1 (the catch-all route to bench/servers.js upstream), ${CONNECTIONS} keep-alive connections; ${WARMUP_ROUNDS} × ${WARMUP} s per side to warm up, then ${ROUNDS} × ${DURATION} s per side, alternating`,
    `gateway   one process at ${gitDescription()}; side key: a sub-account key; side token: an access token of that key (ACCESS_TOKEN_TTL_SECONDS=${TOKEN_TTL_SECONDS})`,
    '',
    ...table(
      ['side', 'round', ...ROUND_COLUMNS],
      [...of('key'), ...of('token'), key, token].map((r) => [r.side, r.round, ...roundCells(r)]),
      2,
    ),
    '(median rows: medians over the rounds, requests their sum; CPU µs/req: the gateway process, per request)',
    '',
    `token / key         req/s ${ratio.toFixed(3)} (target ≥ 0.95: ${ratio >= 0.95 ? 'met' : 'NOT MET'}), ` +
      `p50 ${(token.p50 / key.p50).toFixed(3)}, p99 ${(token.p99 / key.p99).toFixed(3)}, CPU/request ${(token.cpuMicros / key.cpuMicros).toFixed(3)}`,
    `                    req/s round by round: ${of('token')
      .map((t, i) => (t.perSecond / of('key')[i]!.perSecond).toFixed(3))
      .join(', ')}`,
    `signature checks    over the token side's measured rounds (${fmt(token.requests)} requests): ${fmt(tokenCosts.verifications)}, ` +
      `${perRequest.toFixed(6)} per request (target 0 once warm: ${tokenCosts.verifications === 0 ? 'met' : 'NOT MET'}); signatures made: ${fmt(tokenCosts.signatures)}`,
    ...[...costs].map(
      ([name, c]) =>
        `${name.padEnd(5)} lookups       requests that waited for a lookup (in-process misses): ${fmt(c.waited)}; Postgres queries: ${fmt(c.postgres)}; ` +
        `admitted from the last second's memory: ${fmt(c.remembered)} (the requests counted: ${fmt((name === 'key' ? key : token).requests)})`,
    ),
  ]
  console.log(lines.join('\n'))
  const log = started.map((s) => s.output().trim()).filter((text) => text !== '')
  if (log.length > 0) console.error(`the servers wrote:\n${log.join('\n')}`)
}

run(main)
