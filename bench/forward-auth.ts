// Forward authorization (docs/forward-auth.md): decisions a second on AUTHZ_PORT against proxied
// requests a second on PORT, from one gateway process, same key, same run, alternating rounds.
// A decision runs the same steps as the proxied request (key, acting header, scopes, limits) and
// answers 200 with the trusted headers; the proxied one also goes to the upstream and back. The
// target is decided / proxied ≥ 2. A third side: nginx (Debian's, docs/examples/forward-auth/
// nginx.conf as the tests run it) asking the gateway and proxying to the upstream itself, against
// the gateway proxying alone. Then a revoked key's next decision. bench/README.md has figures.
import http from 'node:http'
import { startNginx } from '../test/helpers/front-proxies.js'
import {
  createDatabase,
  envInt,
  freePorts,
  isInterrupted,
  load,
  type Measured,
  medianOf,
  PROXIED_PATH,
  reportHead,
  ROUND_COLUMNS,
  request,
  roundCells,
  roundLine,
  run,
  runCli,
  REDIS_URL,
  type Server,
  seedActing,
  sleep,
  startGateway,
  startUpstream,
  stopChild,
  table,
} from './lib.js'

const DURATION = envInt('BENCH_DURATION', 5)
const CONNECTIONS = envInt('BENCH_CONNECTIONS', 32)
const ROUNDS = envInt('BENCH_ROUNDS', 6)
const WARMUP = envInt('BENCH_WARMUP', 5)

type SideName = 'proxied' | 'decided' | 'nginx'
interface Round extends Measured {
  side: SideName
}

async function main(): Promise<void> {
  const db = await createDatabase('forward_auth')
  const started: Server[] = []
  const cleanups: (() => unknown)[] = []
  try {
    const upstream = await startUpstream()
    started.push(upstream)
    const [authzPort] = (await freePorts(1)) as [number]
    // The request log off: its writes to the same Postgres would only add noise to both sides.
    const env = { REQUEST_LOG_RETENTION_DAYS: '0', AUTHZ_PORT: String(authzPort) }
    const gateway = await startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url, env })
    started.push(gateway)
    const authzUrl = `http://127.0.0.1:${authzPort}`
    const seed = await seedActing(gateway, db.url)
    const nginx = await startNginx({ teardown: (fn) => cleanups.push(fn) }, authzUrl, upstream.url)
    const sides: { name: SideName; url: string; path: string; expectBody: null | undefined }[] = [
      { name: 'proxied', url: gateway.url, path: PROXIED_PATH, expectBody: undefined },
      { name: 'decided', url: authzUrl, path: `/envoy${PROXIED_PATH}`, expectBody: null },
      { name: 'nginx', url: nginx.url, path: PROXIED_PATH, expectBody: undefined },
    ]
    for (const side of sides) {
      const response = await fetch(`${side.url}${side.path}`, { headers: seed.headers })
      await response.text()
      if (response.status !== 200) throw new Error(`${side.name}: GET ${side.path} answered ${response.status}`)
    }
    const measure = async (side: (typeof sides)[number], seconds: number, label: string): Promise<Round> => {
      await sleep(500)
      const r = await load({
        url: side.url,
        path: side.path,
        headers: seed.headers,
        connections: CONNECTIONS,
        seconds,
        pid: gateway.child.pid,
        expectBody: side.expectBody,
      })
      console.error(roundLine(`${side.name} ${label}`, r))
      return { ...r, side: side.name }
    }
    for (const side of sides) await measure(side, WARMUP, 'warm-up')
    const rounds: Round[] = []
    for (let r = 1; r <= ROUNDS; r++) for (const side of sides) rounds.push(await measure(side, DURATION, String(r)))

    // A parent key of its own, revoked while warm: its next decision, and how long until refused.
    const cliEnv = { DATABASE_URL: db.url, REDIS_URL }
    const made = JSON.parse(
      await runCli(
        ['keys', 'create', '--account', seed.parentId, '--name', 'revoked', '--scopes', 'things:read'],
        cliEnv,
      ),
    ) as { api_key: string; key: { id: string } }
    const asRevoked = { authorization: `Bearer ${made.api_key}` }
    const decide = () =>
      request(new http.Agent(), new URL(authzUrl), { method: 'GET', path: `/envoy${PROXIED_PATH}`, headers: asRevoked })
    if ((await decide()).status !== 200) throw new Error('the key to revoke was not allowed')
    await runCli(['keys', 'revoke', '--account', seed.parentId, '--key', made.key.id], cliEnv)
    const revokedAt = performance.now()
    let refusedAfterMs = Number.NaN
    for (let i = 0; i < 1000; i++) {
      if ((await decide()).status === 401) {
        refusedAfterMs = performance.now() - revokedAt
        break
      }
      await sleep(5)
    }

    const of = (name: SideName) => rounds.filter((r) => r.side === name)
    const proxied = medianOf(of('proxied'))
    const decided = medianOf(of('decided'))
    const viaNginx = medianOf(of('nginx'))
    const ratio = decided.perSecond / proxied.perSecond
    console.log(
      [
        ...reportHead('bench:forward-auth'),
        `load      GET ${PROXIED_PATH} as a parent acting as its sub-account, ${CONNECTIONS} keep-alive connections; ${ROUNDS} × ${DURATION} s per side, alternating`,
        `sides     proxied: on PORT, to the upstream and back; decided: GET /envoy${PROXIED_PATH} on AUTHZ_PORT (Envoy ext_authz's form), the same gateway process;`,
        `          nginx: one nginx worker with docs/examples/forward-auth/nginx.conf, asking /nginx and proxying to the upstream (CPU/request: the gateway's)`,
        '',
        ...table(
          ['side', ...ROUND_COLUMNS],
          [
            ['proxied', ...roundCells(proxied)],
            ['decided', ...roundCells(decided)],
            ['nginx', ...roundCells(viaNginx)],
          ],
        ),
        '',
        `decided / proxied   req/s ${ratio.toFixed(2)} (target ≥ 2: ${ratio >= 2 ? 'met' : 'NOT MET'}), ` +
          `p99 ${(decided.p99 / proxied.p99).toFixed(2)}, CPU/request ${(decided.cpuMicros / proxied.cpuMicros).toFixed(2)}`,
        `                    req/s round by round: ${of('decided')
          .map((d, i) => (d.perSecond / of('proxied')[i]!.perSecond).toFixed(2))
          .join(', ')}`,
        `nginx / proxied     req/s ${(viaNginx.perSecond / proxied.perSecond).toFixed(2)}, p99 ${(viaNginx.p99 / proxied.p99).toFixed(2)}, the gateway's CPU/request ${(viaNginx.cpuMicros / proxied.cpuMicros).toFixed(2)}`,
        `revoked key         refused on AUTHZ_PORT ${refusedAfterMs.toFixed(0)} ms after the CLI's revoke returned (target ≤ 1000)`,
      ].join('\n'),
    )
  } catch (err) {
    if (!isInterrupted()) for (const server of started) console.error(`${server.url} wrote:\n${server.output()}`)
    throw err
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup()
    for (const server of started.reverse()) await stopChild(server.child).catch((err) => console.error(err))
    await db.drop()
  }
}

run(main)
