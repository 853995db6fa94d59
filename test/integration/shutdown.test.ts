// Graceful shutdown (docs/operations.md) of a real gateway process, the way a rolling deploy ends
// one: SIGTERM while keep-alive clients keep it busy. The test plays the load balancer: it polls
// /readyz on fresh connections and stops sending new requests once it answers 503. Every request
// that was started must get a whole 2xx answer, the process must exit 0, and no usage count may be
// lost (the meter's last counts are flushed at close).
//
// Requests "in flight when the close begins" are made certain, not likely: the upstream holds
// some requests until the test has seen the listener refuse connections (app.close() has begun),
// and only then answers them. Nothing else depends on timing; the bounds below only stop a hang.
import { spawn, type ChildProcess } from 'node:child_process'
import { connect, type Socket } from 'node:net'
import { Agent, type IncomingHttpHeaders, type ServerResponse } from 'node:http'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { freshDatabase } from '../helpers/db.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { createParent } from '../helpers/gateway.js'
import { callAs, getOverAgent, rawRequest } from '../helpers/http.js'
import { eventually } from '../helpers/poll.js'
import { REDIS_URL, redisPrefix, requireRedis } from '../helpers/redis.js'
import { closedPort, holdingUpstream } from '../helpers/upstream.js'
import { RUN_TYPESCRIPT } from '../helpers/typescript.js'

await requireRedis()
const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url))
/** Generous bounds against hangs on a slow, busy machine; no assertion is about speed. */
const START_TIMEOUT = 60_000
const HANG_TIMEOUT = 30_000
/**
 * SHUTDOWN_TIMEOUT_MS: longer than the requests take, so that nothing is cut for being slow.
 * Should the gateway still hold a connection at the end of it, it says so in a warning, which
 * fails the test; the process is given this long again to exit, so that the failure is that
 * clear message rather than a hang.
 */
const SHUTDOWN_TIMEOUT_MS = 15_000
const EXIT_TIMEOUT = SHUTDOWN_TIMEOUT_MS + HANG_TIMEOUT

const WORKERS = 20
/** The load's upstream answers after this long, more than the shutdown delay below. */
const LOAD_DELAY_MS = [1100, 1300] as const
/**
 * How long /readyz says 503 before the gateway stops accepting: long enough that a test process
 * starved of CPU for a moment still sees the 503 (and stops starting requests) before the close;
 * the held requests make "in flight at the close" certain anyway.
 */
const SHUTDOWN_DELAY_MS = 1000

/** True once nothing accepts connections on the port any more (the listener was closed). */
function refuses(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1')
    socket.once('connect', () => {
      socket.destroy()
      resolve(false)
    })
    socket.once('error', (err: NodeJS.ErrnoException) => {
      socket.destroy()
      resolve(err.code === 'ECONNREFUSED')
    })
  })
}

interface Exit {
  code: number | null
  signal: NodeJS.Signals | null
}

interface GatewayProcess {
  child: ChildProcess
  port: number
  base: string
  /** http://127.0.0.1:<METRICS_PORT> */
  metricsBase: string
  /** Settles when the process has exited. */
  exit: Promise<Exit>
  exited(): boolean
  stdout(): string
  stderr(): string
}

const running = new Set<ChildProcess>()

// Whatever happens, no gateway outlives the test file.
t.teardown(() => {
  for (const child of running) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
})

/**
 * `node --import scripts/typescript.mjs src/main.ts` with the given environment; resolves once /readyz says 200, as
 * a load balancer would wait for, and its body says Redis is connected (or off).
 */
async function spawnGateway(env: Record<string, string>): Promise<GatewayProcess> {
  // A port found free may be taken by another test's socket before the gateway binds it: the
  // gateway then refuses to start (naming the port), and another free port is tried.
  for (let attempt = 1; ; attempt++) {
    try {
      return await spawnGatewayOnce(env)
    } catch (err) {
      if (attempt === 3 || !/the port is already in use/.test((err as Error).message)) throw err
    }
  }
}

async function spawnGatewayOnce(env: Record<string, string>): Promise<GatewayProcess> {
  const port = await closedPort()
  const metricsPort = await closedPort()
  const child = spawn(process.execPath, [...RUN_TYPESCRIPT, 'src/main.ts'], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      HOST: '127.0.0.1',
      PORT: String(port),
      METRICS_PORT: String(metricsPort),
      LOG_LEVEL: 'warn',
      SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS),
      // Its load creates sub-accounts far faster than the default 50 management calls a second.
      MANAGEMENT_RATE: '1000000/1s',
      ENCRYPTION_KEY: TEST_ENCRYPTION_KEY,
      ...env,
    },
  })
  running.add(child)
  let out = ''
  let err = ''
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (out += chunk))
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (err += chunk))
  let done = false
  const exit = new Promise<Exit>((resolve) =>
    child.once('exit', (code, signal) => {
      done = true
      running.delete(child)
      resolve({ code, signal })
    }),
  )
  const base = `http://127.0.0.1:${port}`
  const started = await eventually(
    START_TIMEOUT,
    async () => {
      if (done) throw new Error(`the gateway exited at start\nstdout: ${out}\nstderr: ${err}`)
      try {
        // Ready once Postgres answers; wait for Redis too, which connects in the background.
        // A gateway's own answer, not any server's 200 (an upstream's echo says nothing of Redis).
        const ready = await rawRequest(base, { path: '/readyz' })
        const body = ready.status === 200 ? JSON.parse(ready.body) : null
        return body?.status === 'ready' && body.checks?.redis !== 'down'
      } catch {
        return false
      }
    },
    100,
  )
  if (started === null)
    throw new Error(`the gateway was not ready within ${START_TIMEOUT} ms\nstdout: ${out}\nstderr: ${err}`)
  const metricsBase = `http://127.0.0.1:${metricsPort}`
  return { child, port, base, metricsBase, exit, exited: () => done, stdout: () => out, stderr: () => err }
}

/** Resolves with the process's exit, or null if it has not exited within `ms`. */
async function exitWithin(gateway: GatewayProcess, ms: number): Promise<Exit | null> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), ms)))
  try {
    return await Promise.race([gateway.exit, timeout])
  } finally {
    clearTimeout(timer)
  }
}

/** The upstream's answer: a body whose completeness the client can check. */
function answer(response: ServerResponse, path: string): void {
  const body = JSON.stringify({ path, pad: 'x'.repeat(4096) })
  response.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) })
  response.end(body)
}

/**
 * The upstream: /v1/hold/* waits until the test releases it, everything else answers after
 * LOAD_DELAY_MS. Either way the answer is 200 with a body of known content.
 */
const loadUpstream = (t: Test) =>
  holdingUpstream(t, {
    holdPrefix: '/v1/hold/',
    delayMs: LOAD_DELAY_MS,
    reply: (request, response) => answer(response, request.url!),
  })

interface Outcome {
  status: number
  headers: IncomingHttpHeaders
  /** The body arrived whole: as long as declared, and naming the path that was asked for. */
  complete: boolean
  /** When the last byte arrived (Date.now()). */
  at: number
}

/** A GET over `agent` (keep-alive), read to its end; rejects on any socket error. */
async function get(base: string, agent: Agent, path: string, headers: Record<string, string>): Promise<Outcome> {
  const response = await getOverAgent(base, agent, path, headers)
  let complete = response.complete && response.body.length === Number(response.headers['content-length'])
  if (complete && response.status === 200) {
    try {
      complete = (JSON.parse(response.body.toString('utf8')) as { path?: string }).path === path
    } catch {
      complete = false
    }
  }
  return { status: response.status, headers: response.headers, complete, at: Date.now() }
}

const describe = (err: unknown) => `${(err as NodeJS.ErrnoException).code ?? ''} ${(err as Error).message}`.trim()

/** The usage_daily rows of one tenant, summed by status class over every day. */
async function usageByClass(
  sql: Awaited<ReturnType<typeof freshDatabase>>['sql'],
  tenantId: string,
): Promise<Record<string, number>> {
  const rows = await sql<{ status_class: number; n: number }[]>`
    select status_class, sum(requests)::int as n from usage_daily where tenant_id = ${tenantId} group by status_class`
  return Object.fromEntries(rows.map((row) => [`${row.status_class}xx`, row.n]))
}

/** Warnings and errors the gateway wrote (LOG_LEVEL=warn), as parsed lines. */
function logLines(stdout: string): { level: number; msg: string }[] {
  return stdout
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as { level: number; msg: string })
}

/**
 * The gateway's log after its close: no error, and no keep-alive connection cut by the shutdown
 * timeout (the gateway closed each itself once its requests were done).
 */
function closedCleanly(t: Test, stdout: string): void {
  const lines = logLines(stdout)
  t.same(
    lines.filter((line) => line.level >= 50),
    [],
    'no error was logged',
  )
  t.same(
    lines.filter((line) => /shutdown timeout/.test(line.msg)),
    [],
    'the gateway closed its keep-alive connections itself once their requests were done, without waiting for the shutdown timeout to cut them',
  )
}

t.test('SIGTERM under keep-alive load: no request fails, no usage count is lost, exit 0', async (t) => {
  // The gateway migrates the empty database itself at start.
  const db = await freshDatabase(t, { migrated: false })
  const upstream = await loadUpstream(t)
  const gateway = await spawnGateway({
    DATABASE_URL: db.url,
    REDIS_URL,
    REDIS_KEY_PREFIX: redisPrefix(t),
    UPSTREAM_URL: upstream.url,
    SHUTDOWN_DELAY_MS: String(SHUTDOWN_DELAY_MS),
  })

  const parent = await createParent(db.sql, { name: 'shutdown' })
  const created = await callAs(gateway.base, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name: 'under load', external_id: 'load-sub' },
  })
  t.equal(created.status, 201, `sub-account created: ${created.body}`)
  const sub = created.json() as { id: string }

  // The load: each worker one keep-alive connection, one request after another, as the sub-account.
  // Like a load balancer's pool, the connections stay open when the worker stops: closing them
  // is the gateway's business.
  const agents: Agent[] = []
  t.teardown(() => {
    for (const agent of agents) agent.destroy()
  })
  let stopStarting = false
  let started = 0
  const answered: Outcome[] = []
  const failures: string[] = []
  async function worker(w: number): Promise<void> {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 })
    agents.push(agent)
    const headers = {
      authorization: `Bearer ${parent.apiKey}`,
      // By UUID and by external id, in turns.
      'x-service-acting-tenant': w % 2 === 0 ? sub.id : 'ext:load-sub',
    }
    for (let n = 0; !stopStarting; n++) {
      started++
      const path = `/v1/load/${w}/${n}`
      try {
        const outcome = await get(gateway.base, agent, path, headers)
        answered.push(outcome)
        if (outcome.status !== 200 || !outcome.complete)
          failures.push(`${path}: ${outcome.status}${outcome.complete ? '' : ' (incomplete body)'}`)
      } catch (err) {
        failures.push(`${path}: ${describe(err)}`)
      }
    }
  }
  const workers = Array.from({ length: WORKERS }, (_, w) => worker(w))

  // Warm: about two rounds on every connection.
  const warm = await eventually(START_TIMEOUT, async () => answered.length >= WORKERS * 2, 50)
  t.not(warm, null, `the load is running (${answered.length} answered)`)

  // Requests certain to be in flight when the close begins: the upstream holds them.
  const HELD = 3
  const holdAgents = Array.from({ length: HELD }, () => new Agent({ keepAlive: true, maxSockets: 1 }))
  agents.push(...holdAgents)
  const heldRequests = holdAgents.map((agent, i) =>
    get(gateway.base, agent, `/v1/hold/${i}`, {
      authorization: `Bearer ${parent.apiKey}`,
      'x-service-acting-tenant': sub.id,
    }).then(
      (outcome) => outcome,
      (err: unknown) => new Error(describe(err)),
    ),
  )
  t.not(
    await eventually(HANG_TIMEOUT, async () => upstream.held() === HELD),
    null,
    'the held requests reached the upstream',
  )

  const answeredBeforeSignal = answered.length
  gateway.child.kill('SIGTERM')

  // The load balancer: /readyz on a fresh connection until it says 503, then no new requests.
  let notReady: { status: number; headers: IncomingHttpHeaders; body: Record<string, unknown> } | null = null
  let probeError: string | null = null
  await eventually(
    HANG_TIMEOUT,
    async () => {
      try {
        const res = await rawRequest(gateway.base, { path: '/readyz' })
        if (res.status === 200) return false
        notReady = { status: res.status, headers: res.headers, body: res.json() }
      } catch (err) {
        probeError = describe(err)
      }
      return true
    },
    10,
  )
  stopStarting = true
  t.equal(probeError, null, '/readyz answered until the load balancer saw it say 503 (the listener was still open)')
  t.ok(notReady, '/readyz stopped answering 200 after SIGTERM')
  if (notReady !== null) {
    const { status, headers, body } = notReady as {
      status: number
      headers: IncomingHttpHeaders
      body: Record<string, unknown>
    }
    t.equal(status, 503, '/readyz: 503 while draining')
    t.match(String(headers['content-type']), /^application\/problem\+json/, '/readyz: problem+json')
    t.equal(body.code, 'not_ready', '/readyz: code not_ready')
    t.equal(body.draining, true, '/readyz: draining true')
    t.equal(body.status, 503)
  }

  // app.close() has begun once the listener refuses; the held requests keep the process alive.
  const closing = await eventually(HANG_TIMEOUT, () => refuses(gateway.port), 10)
  t.not(closing, null, 'the gateway stopped accepting connections')
  t.notOk(gateway.exited(), 'the process waits for the requests still in flight')
  const closedAt = Date.now()
  upstream.release()
  const releasedAt = Date.now()

  const held = await Promise.all(heldRequests)
  for (const [i, outcome] of held.entries()) {
    if (outcome instanceof Error) {
      t.fail(`held request ${i} failed: ${outcome.message}`)
      continue
    }
    t.equal(outcome.status, 200, `held request ${i}, in flight when the close began: 200`)
    t.ok(outcome.complete, `held request ${i}: the whole body`)
  }

  await Promise.all(workers)
  const exit = await exitWithin(gateway, EXIT_TIMEOUT)
  t.same(exit, { code: 0, signal: null }, `the process exits 0 on its own\nstderr: ${gateway.stderr()}`)
  t.comment(`exited ${Date.now() - releasedAt} ms after the held requests were released`)

  t.same(failures, [], 'no request failed')
  t.equal(answered.length, started, 'every request started got an answer')
  const ok =
    answered.filter((outcome) => outcome.status === 200 && outcome.complete).length +
    held.filter((h) => !(h instanceof Error) && h.status === 200).length
  t.ok(answered.length > answeredBeforeSignal, 'some load was in flight at SIGTERM')
  t.comment(
    `${answered.length} load requests (${answered.length - answeredBeforeSignal} answered after SIGTERM, ` +
      `${answered.filter((o) => o.at > closedAt).length} after the listener closed) and ${HELD} held`,
  )

  t.equal(upstream.received.length, ok, 'the upstream received each answered request once, and nothing else')
  t.same(await usageByClass(db.sql, sub.id), { '2xx': ok }, `usage_daily holds exactly the ${ok} answers, all 2xx`)
  t.same(await usageByClass(db.sql, parent.id), {}, "nothing counted for the parent's own tenant")

  closedCleanly(t, gateway.stdout())
})

/** A gateway with SHUTDOWN_DELAY_MS=0 on a database of its own, and a parent with its key. */
async function gatewayWithoutDelay(t: Test, parentName: string, env: Record<string, string> = {}) {
  const db = await freshDatabase(t, { migrated: false })
  const upstream = await loadUpstream(t)
  const gateway = await spawnGateway({
    DATABASE_URL: db.url,
    REDIS_URL,
    REDIS_KEY_PREFIX: redisPrefix(t),
    UPSTREAM_URL: upstream.url,
    SHUTDOWN_DELAY_MS: '0',
    ...env,
  })
  const parent = await createParent(db.sql, { name: parentName })
  return { db, upstream, gateway, parent }
}

/**
 * A request to /v1/hold/`name` on a keep-alive connection of its own, once the upstream holds it:
 * its outcome, or the error it ended with, when the upstream lets it go.
 */
async function holdRequest(
  t: Test,
  {
    upstream,
    gateway,
    parent,
  }: Pick<Awaited<ReturnType<typeof gatewayWithoutDelay>>, 'upstream' | 'gateway' | 'parent'>,
  name: string,
): Promise<{ inFlight: Promise<Outcome | Error> }> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  t.teardown(() => agent.destroy())
  const inFlight = get(gateway.base, agent, `/v1/hold/${name}`, { authorization: `Bearer ${parent.apiKey}` }).then(
    (outcome) => outcome,
    (err: unknown) => new Error(describe(err)),
  )
  t.not(await eventually(HANG_TIMEOUT, async () => upstream.held() === 1), null, 'the request reached the upstream')
  return { inFlight }
}

// Each of these runs a gateway of its own on a database of its own, and spends most of its time
// starting that process or waiting for it to exit: they run at once.
t.test('one gateway each, with SHUTDOWN_DELAY_MS=0', { jobs: 4 }, async (t) => {
  t.test('SHUTDOWN_DELAY_MS=0: a request in flight at SIGTERM still completes', async (t) => {
    const started = await gatewayWithoutDelay(t, 'no delay')
    const { db, upstream, gateway, parent } = started
    // A keep-alive client that keeps its connection until the gateway closes it.
    const { inFlight } = await holdRequest(t, started, 'only')

    gateway.child.kill('SIGTERM')
    t.not(
      await eventually(HANG_TIMEOUT, () => refuses(gateway.port), 10),
      null,
      'the gateway stopped accepting connections',
    )
    t.notOk(gateway.exited(), 'the process waits for the request in flight')
    upstream.release()
    const releasedAt = Date.now()

    const outcome = await inFlight
    if (outcome instanceof Error) t.fail(`the request in flight failed: ${outcome.message}`)
    else {
      t.equal(outcome.status, 200, 'the request in flight at SIGTERM: 200')
      t.ok(outcome.complete, 'with its whole body')
    }
    const exit = await exitWithin(gateway, EXIT_TIMEOUT)
    t.same(exit, { code: 0, signal: null }, `the process exits 0 on its own\nstderr: ${gateway.stderr()}`)
    t.comment(`exited ${Date.now() - releasedAt} ms after the request was released`)
    t.equal(upstream.received.length, 1)
    t.same(await usageByClass(db.sql, parent.id), { '2xx': 1 }, 'and it is counted')
    closedCleanly(t, gateway.stdout())
  })

  // The relayed second signal, a hangup and an unhandled rejection: test/integration/start-gateway.test.ts,
  // in process.

  t.test('the health paths answer on the metrics port while clients hold every public connection', async (t) => {
    const { gateway } = await gatewayWithoutDelay(t, 'probed', { MAX_CONNECTIONS: '3' })
    // Three busy connections, the cap of the public port (idle ones would make room): each sends
    // one cheap request and, in the same write, the start of a head it never finishes. Its answer
    // to the first says it was accepted; the gateway read the second head's start with it.
    const held: Socket[] = []
    t.teardown(() => {
      for (const socket of held) socket.destroy()
    })
    for (let i = 0; i < 3; i++) {
      const socket = connect(gateway.port, '127.0.0.1')
      held.push(socket)
      await new Promise<void>((resolve) => {
        socket.once('data', () => resolve())
        socket.write('GET /nowhere HTTP/1.1\r\nHost: gw\r\n\r\nGET /nowhere HTTP/1.1\r\nHost: gw\r\n')
      })
    }
    const publicProbe = await rawRequest(gateway.base, { path: '/healthz' }).then(
      (res) => res.status,
      () => 'refused',
    )
    t.equal(publicProbe, 'refused', 'the public port holds no more connections')
    const healthz = await rawRequest(gateway.metricsBase, { path: '/healthz' })
    t.equal(healthz.status, 200, 'GET /healthz on the metrics port')
    t.same(JSON.parse(healthz.body), { status: 'ok' })
    const readyz = await rawRequest(gateway.metricsBase, { path: '/readyz' })
    t.equal(readyz.status, 200, 'GET /readyz on the metrics port')
    t.equal(JSON.parse(readyz.body).status, 'ready')
    gateway.child.kill('SIGTERM')
    await gateway.exit
  })
})
