// The cost of IP allow-lists on the proxied path (docs/api.md, Key policies and IP allow-lists):
// two gateway processes of the same build, each loaded in turn with a sub-account's own key, one
// key with an allow-list of ten CIDRs (the caller's last) and one without. Same run, alternating
// rounds; the target is allow-list / none ≥ 0.97. bench/README.md has the figures.
import http from 'node:http'
import {
  createDatabase,
  envInt,
  type Gateway,
  isInterrupted,
  load,
  type Measured,
  medianOf,
  reportHead,
  ROUND_COLUMNS,
  request,
  roundCells,
  roundLine,
  run,
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

/** Ten entries, the caller's last: the most a match has to look through in a list this long. */
const ALLOWLIST = [
  '10.0.0.0/8',
  '172.16.0.0/12',
  '192.168.0.0/16',
  '198.51.100.0/24',
  '203.0.113.0/24',
  '2001:db8::/32',
  'fd00::/8',
  '100.64.0.0/10',
  '::1',
  '127.0.0.0/8',
]

type SideName = 'none' | 'allowlist'
interface Round extends Measured {
  side: SideName
}

async function mintSubKey(
  gateway: Gateway,
  seed: Awaited<ReturnType<typeof seedActing>>,
  ipAllowlist: string[] | null,
) {
  const answer = await request(new http.Agent(), new URL(gateway.url), {
    method: 'POST',
    path: `/v1/sub-accounts/${seed.subId}/api-keys`,
    headers: { authorization: seed.headers.authorization!, 'x-service-acting-tenant': 'self' },
    body: JSON.stringify({ name: 'bench', scopes: ['things:read'], ip_allowlist: ipAllowlist }),
  })
  if (answer.status !== 201) throw new Error(`minting a key answered ${answer.status}: ${answer.body.slice(0, 300)}`)
  return { authorization: `Bearer ${(JSON.parse(answer.body) as { api_key: string }).api_key}` }
}

async function main(): Promise<void> {
  const db = await createDatabase('allowlist')
  const started: Server[] = []
  try {
    const upstream = await startUpstream()
    started.push(upstream)
    // The request log off on both: its writes to the same Postgres would only add noise.
    const env = { REQUEST_LOG_RETENTION_DAYS: '0' }
    const open = await startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url, env })
    started.push(open)
    const walled = await startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url, env })
    started.push(walled)
    const seed = await seedActing(open, db.url)
    const sides = [
      { name: 'none' as const, server: open, headers: await mintSubKey(open, seed, null) },
      { name: 'allowlist' as const, server: walled, headers: await mintSubKey(open, seed, ALLOWLIST) },
    ]
    for (const side of sides) {
      const response = await fetch(`${side.server.url}/v1/things/1`, { headers: side.headers })
      await response.text()
      if (response.status !== 200) throw new Error(`${side.name}: GET /v1/things/1 answered ${response.status}`)
    }
    // The lists are really checked: the same list without the caller's address is refused.
    const elsewhere = await mintSubKey(open, seed, ALLOWLIST.slice(0, -1))
    const refused = await fetch(`${walled.url}/v1/things/1`, { headers: elsewhere })
    await refused.text()
    if (refused.status !== 403) throw new Error(`a key listing other addresses answered ${refused.status}, not 403`)
    const measure = async (side: (typeof sides)[number], seconds: number, label: string): Promise<Round> => {
      await sleep(500)
      await fetch(`${side.server.url}/v1/things/1`, { headers: side.headers }).then((res) => res.text())
      const r = await load({
        url: side.server.url,
        headers: side.headers,
        connections: CONNECTIONS,
        seconds,
        pid: side.server.child.pid,
      })
      console.error(roundLine(`${side.name} ${label}`, r))
      return { ...r, side: side.name }
    }
    for (const side of sides) await measure(side, WARMUP, 'warm-up')
    const rounds: Round[] = []
    for (let r = 1; r <= ROUNDS; r++) for (const side of sides) rounds.push(await measure(side, DURATION, String(r)))

    const of = (name: SideName) => rounds.filter((r) => r.side === name)
    const none = medianOf(of('none'))
    const listed = medianOf(of('allowlist'))
    const ratio = listed.perSecond / none.perSecond
    console.log(
      [
        ...reportHead('bench:allowlist'),
        `load      GET /v1/things/1 with a sub-account's own key, ${CONNECTIONS} keep-alive connections; ${ROUNDS} × ${DURATION} s per side, alternating`,
        `sides     none: a key without an allow-list; allowlist: a key whose list has ${ALLOWLIST.length} entries, 127.0.0.0/8 last (each its own gateway process)`,
        '',
        ...table(
          ['side', ...ROUND_COLUMNS],
          [
            ['none', ...roundCells(none)],
            ['allowlist', ...roundCells(listed)],
          ],
        ),
        '',
        `allowlist / none    req/s ${ratio.toFixed(3)} (target ≥ 0.97: ${ratio >= 0.97 ? 'met' : 'NOT MET'}), ` +
          `p99 ${(listed.p99 / none.p99).toFixed(3)}, CPU/request ${(listed.cpuMicros / none.cpuMicros).toFixed(3)}`,
        `                    req/s round by round: ${of('allowlist')
          .map((l, i) => (l.perSecond / of('none')[i]!.perSecond).toFixed(3))
          .join(', ')}`,
      ].join('\n'),
    )
  } catch (err) {
    if (!isInterrupted()) for (const server of started) console.error(`${server.url} wrote:\n${server.output()}`)
    throw err
  } finally {
    for (const server of started.reverse()) await stopChild(server.child).catch((err) => console.error(err))
    await db.drop()
  }
}

run(main)
