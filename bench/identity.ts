// What signed identity for upstreams costs (docs/credentials.md): one gateway, one upstream, one
// tenant, two routes that differ only by `identity`, loaded in alternating rounds. Prints the
// req/s ratio (target ≥ 0.90) and the signatures made per request once warm (target ≈ 0: the
// cached assertion is reused). bench/README.md says what it starts and its knobs.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import { resolve } from 'node:path'
import { createRemoteJWKSet, jwtVerify } from 'jose'
import {
  createDatabase,
  envInt,
  fmt,
  type Gateway,
  isInterrupted,
  load,
  type Measured,
  medianOf,
  metric,
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

const DURATION = envInt('BENCH_DURATION', 5)
const CONNECTIONS = envInt('BENCH_CONNECTIONS', 50)
const ROUNDS = envInt('BENCH_ROUNDS', 6)
const WARMUP = envInt('BENCH_WARMUP', 5)
const WARMUP_ROUNDS = envInt('BENCH_WARMUP_ROUNDS', 2)
const TTL_SECONDS = envInt('BENCH_IDENTITY_TTL', 60, 10)
const ISSUER = 'https://gateway.bench'
const AUDIENCE = 'https://things.bench'

type SideName = 'plain' | 'signed'
const SIDES: { name: SideName; prefix: string }[] = [
  { name: 'plain', prefix: '/v1/plain' },
  { name: 'signed', prefix: '/v1/signed' },
]
interface Round extends Measured {
  side: SideName
  round: string
  /** Identity signatures the gateway made during the round. */
  signatures: number
}

async function main(): Promise<void> {
  const db = await createDatabase('identity')
  const dir = mkdtempSync(resolve(os.tmpdir(), 'tgw-bench-identity-'))
  const started: Server[] = []
  try {
    const upstream = await startUpstream()
    started.push(upstream)
    // The two routes, alike but for `identity`: the upstream answers both paths the same body.
    const routeTable = resolve(dir, 'gateway.yaml')
    writeFileSync(
      routeTable,
      [
        'routes:',
        `  - { prefix: /v1/plain, upstream: "${upstream.url}" }`,
        `  - { prefix: /v1/signed, upstream: "${upstream.url}", identity: { audience: "${AUDIENCE}", ttl_seconds: ${TTL_SECONDS} } }`,
        '',
      ].join('\n'),
    )
    const gateway = await startGateway({
      databaseUrl: db.url,
      upstreamUrl: upstream.url,
      env: { GATEWAY_CONFIG: routeTable, ISSUER_URL: ISSUER },
    })
    started.push(gateway)
    const acting = await seedActing(gateway, db.url)
    await preflight(gateway, acting)

    const measure = async (prefix: string, name: SideName, seconds: number, round: string): Promise<Round> => {
      await sleep(500)
      // One request warms the route's cache entries after the other side's round (and idling).
      await fetch(`${gateway.url}${prefix}/things/1`, { headers: acting.headers }).then((res) => res.text())
      const before = await scrape(gateway.metricsPort)
      const r = await load({
        url: gateway.url,
        path: `${prefix}/things/1`,
        headers: acting.headers,
        connections: CONNECTIONS,
        seconds,
        pid: gateway.child.pid,
      })
      const after = await scrape(gateway.metricsPort)
      const signatures =
        metric(after, 'tgw_signatures_total', 'purpose="identity"') -
        metric(before, 'tgw_signatures_total', 'purpose="identity"')
      console.error(`${roundLine(`${name} ${round}`, r)}, ${signatures} signatures`)
      return { ...r, side: name, round, signatures }
    }
    console.error(`warming up, ${WARMUP_ROUNDS} × ${WARMUP} s per side…`)
    for (let pass = 1; pass <= WARMUP_ROUNDS; pass++)
      for (const side of SIDES) await measure(side.prefix, side.name, WARMUP, `warm-up ${pass}`)
    console.error(`measuring, ${ROUNDS} × ${DURATION} s per side…`)
    const rounds: Round[] = []
    for (let r = 1; r <= ROUNDS; r++)
      for (const side of SIDES) rounds.push(await measure(side.prefix, side.name, DURATION, String(r)))
    const whole = metric(await scrape(gateway.metricsPort), 'tgw_signatures_total', 'purpose="identity"')
    report(rounds, gateway, whole)
  } catch (err) {
    if (!isInterrupted()) for (const server of started) console.error(`${server.url} wrote:\n${server.output()}`)
    throw err
  } finally {
    for (const server of started.reverse()) await stopChild(server.child).catch((err) => console.error(err))
    await db.drop()
    rmSync(dir, { recursive: true, force: true })
  }
}

/** Both routes reach the upstream as the sub-account; only the signed one carries a valid assertion. */
async function preflight(gateway: Gateway, acting: { subId: string; headers: Record<string, string> }) {
  const jwks = createRemoteJWKSet(new URL(`${gateway.url}/.well-known/jwks.json`))
  for (const side of SIDES) {
    const response = await fetch(`${gateway.url}${side.prefix}/echo`, { headers: acting.headers })
    const seen = (await response.json()) as Record<string, string>
    if (response.status !== 200 || seen['x-service-resolved-tenant'] !== acting.subId)
      throw new Error(`${side.name}: ${response.status} ${JSON.stringify(seen)}`)
    const token = seen['x-service-identity']
    if (side.name === 'plain') {
      if (token !== undefined) throw new Error('plain: the upstream got an X-Service-Identity')
      continue
    }
    if (token === undefined) throw new Error('signed: the upstream got no X-Service-Identity')
    const { payload } = await jwtVerify(token, jwks, {
      issuer: ISSUER,
      audience: AUDIENCE,
      typ: 'JWT',
      algorithms: ['ES256'],
    })
    if (payload.sub !== acting.subId) throw new Error(`signed: the assertion is for ${payload.sub}`)
  }
}

function report(rounds: Round[], gateway: Gateway, wholeRun: number): void {
  const of = (side: SideName) => rounds.filter((r) => r.side === side)
  const medians = new Map(SIDES.map(({ name }) => [name, { ...medianOf(of(name)), side: name, round: 'median' }]))
  const [plain, signed] = [medians.get('plain')!, medians.get('signed')!]
  const ratio = signed.perSecond / plain.perSecond
  const signedRequests = of('signed').reduce((sum, r) => sum + r.requests, 0)
  const signatures = of('signed').reduce((sum, r) => sum + r.signatures, 0)
  const lines = [
    ...reportHead('bench:identity'),
    `load      GET <prefix>/things/1 as a parent key acting as ext:bench-sub, ${CONNECTIONS} keep-alive connections; ${WARMUP_ROUNDS} × ${WARMUP} s per side to warm up, then ${ROUNDS} × ${DURATION} s per side, alternating`,
    `gateway   ${gateway.command}`,
    `routes    plain: /v1/plain; signed: /v1/signed with identity { audience: ${AUDIENCE}, ttl_seconds: ${TTL_SECONDS} }; same gateway process, same upstream`,
    '',
    ...table(
      ['side', 'round', ...ROUND_COLUMNS, 'signatures'],
      [...rounds, ...medians.values()].map((r) => [
        r.side,
        r.round,
        ...roundCells(r),
        'signatures' in r ? String(r.signatures) : '',
      ]),
      2,
    ),
    "(median rows: medians over the rounds, requests their sum; CPU µs/req: the gateway process's user + system time over the round, per request)",
    '',
    `signed / plain      req/s ${ratio.toFixed(3)} (target ≥ 0.90: ${ratio >= 0.9 ? 'met' : 'NOT MET'}), ` +
      `p50 ${(signed.p50 / plain.p50).toFixed(3)}, p99 ${(signed.p99 / plain.p99).toFixed(3)}, CPU/request ${(signed.cpuMicros / plain.cpuMicros).toFixed(3)}`,
    `                    req/s round by round: ${of('signed')
      .map((s, i) => (s.perSecond / of('plain')[i]!.perSecond).toFixed(3))
      .join(', ')}`,
    `signatures          over the signed side's measured rounds: ${fmt(signatures)} for ${fmt(signedRequests)} requests, ` +
      `${(signatures / signedRequests).toExponential(2)} per request (target ≈ 0 once warm: one per ${Math.round(TTL_SECONDS * 0.9)} s, the renewal); ` +
      `${fmt(wholeRun)} over the whole run`,
  ]
  console.log(lines.join('\n'))
  const log = gateway.output().trim()
  if (log !== '') console.error(`the gateway wrote:\n${log}`)
}

run(main)
