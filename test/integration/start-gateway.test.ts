// The gateway's start and stop in process (src/start.ts, `startGateway(env, io)`): the stop rules of
// src/signals.ts on a gateway that listens, with its signals, exit and clock played by the test.
// test/integration/shutdown.test.ts keeps the process whole (signals really delivered, under load).
import { EventEmitter } from 'node:events'
import { Agent, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { startGateway } from '../../src/start.js'
import { freshDatabase } from '../helpers/db.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { createParent } from '../helpers/gateway.js'
import { callAs, getOverAgent } from '../helpers/http.js'
import { eventually } from '../helpers/poll.js'
import { REDIS_URL, redisPrefix, requireRedis } from '../helpers/redis.js'
import { closedPort, holdingUpstream } from '../helpers/upstream.js'

await requireRedis()
const HANG_TIMEOUT = 30_000

/** A gateway started in process on a database of its own, SHUTDOWN_DELAY_MS=0, and a parent with its key. */
async function started(t: Test, name: string, env: Record<string, string> = {}) {
  const db = await freshDatabase(t, { migrated: false })
  const upstream = await holdingUpstream(t, {
    holdPrefix: '/v1/hold/',
    delayMs: [0, 0],
    reply: (_request, response) => response.end('ok'),
  })
  const signals = new EventEmitter()
  let now = Date.now()
  let out = ''
  let err = ''
  const exits: number[] = []
  const env_ = {
    ...process.env,
    DATABASE_URL: db.url,
    REDIS_URL,
    REDIS_KEY_PREFIX: redisPrefix(t),
    UPSTREAM_URL: upstream.url,
    HOST: '127.0.0.1',
    PORT: String(await closedPort()),
    METRICS_PORT: String(await closedPort()),
    LOG_LEVEL: 'info',
    SHUTDOWN_DELAY_MS: '0',
    SHUTDOWN_TIMEOUT_MS: '15000',
    ENCRYPTION_KEY: TEST_ENCRYPTION_KEY,
    ...env,
  }
  const gateway = await startGateway(env_, {
    stdout: { write: (text: string) => (out += text) },
    stderr: (text) => (err += text),
    exit: (code) => exits.push(code),
    on: (event, listener) => signals.on(event, listener),
    clock: () => now,
  })
  if (gateway === null) throw new Error(`the gateway did not start: ${err}`)
  // Whatever happens, the app is closed at the end (a second close is a no-op).
  t.teardown(async () => {
    upstream.release()
    await gateway.app.close()
  })
  const parent = await createParent(db.sql, { name })
  const base = `http://127.0.0.1:${gateway.port}`
  /** A request to /v1/hold/<path> on a connection of its own, once the upstream holds it. */
  const hold = async (path: string) => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 })
    t.teardown(() => agent.destroy())
    const held = upstream.held()
    const inFlight = getOverAgent(base, agent, `/v1/hold/${path}`, { authorization: `Bearer ${parent.apiKey}` }).then(
      (res) => res.status,
      (e: Error) => e.message,
    )
    // An early answer (a refusal) ends the wait at once, and names itself.
    let early: number | string | undefined
    void inFlight.then((outcome) => (early = outcome))
    const reached = await eventually(HANG_TIMEOUT, async () => upstream.held() === held + 1 || early !== undefined)
    t.ok(reached !== null && early === undefined, `the request is held (answered early: ${early ?? 'no'})`)
    return { inFlight }
  }
  return {
    db,
    upstream,
    gateway,
    parent,
    base,
    hold,
    signal: (name: NodeJS.Signals) => signals.emit(name, name),
    emit: (event: string, arg: unknown) => signals.emit(event, arg),
    /** Moves the gateway's clock on. */
    after: (ms: number) => (now += ms),
    exits,
    /** The exit codes once `n` exits were asked for. */
    exited: async (n = 1) => {
      t.not(await eventually(HANG_TIMEOUT, async () => exits.length >= n), null, `exit asked for ${n} time(s)`)
      return exits
    },
    log: () =>
      out
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as { level: number; msg: string; signal?: string }),
  }
}

async function usageByClass(sql: Awaited<ReturnType<typeof freshDatabase>>['sql'], tenantId: string) {
  const rows = await sql<{ status_class: number; n: number }[]>`
    select status_class, sum(requests)::int as n from usage_daily where tenant_id = ${tenantId} group by status_class`
  return Object.fromEntries(rows.map((row) => [`${row.status_class}xx`, row.n]))
}

// npm and tsx pass a process group's SIGTERM (or a terminal's Ctrl-C) on to the gateway, which then
// gets it twice at once: the copy must not cut the drain short, nor skip the usage flush.
t.test('the same signal twice at once drains as one: the request finishes, usage is flushed, exit 0', async (t) => {
  for (const name of ['SIGTERM', 'SIGINT'] as const) {
    const g = await started(t, `twice ${name}`)
    const { inFlight } = await g.hold('twice')
    g.signal(name)
    g.after(3)
    g.signal(name)
    t.not(await eventually(HANG_TIMEOUT, async () => g.gateway.app.readiness.draining), null, 'draining')
    t.same(g.exits, [], `the copy of ${name} did not end the process: it waits for the request in flight`)
    g.upstream.release()
    t.equal(await inFlight, 200, 'the request in flight: 200')
    t.same(await g.exited(), [0], 'exit 0, once')
    t.same(await usageByClass(g.db.sql, g.parent.id), { '2xx': 1 }, 'its usage is flushed')
    const log = g.log()
    t.match(
      log.find((line) => line.msg === 'draining'),
      { signal: name },
      `draining on ${name}`,
    )
    t.ok(
      log.some((line) => line.msg === 'closed'),
      'closed in full',
    )
    t.same(
      log.filter((line) => line.level >= 50),
      [],
      'no error logged',
    )
  }
})

t.test('a second stop signal a second later quits at once; the other one within the second does not', async (t) => {
  const g = await started(t, 'later')
  const { inFlight } = await g.hold('later')
  g.signal('SIGINT')
  g.after(500)
  g.signal('SIGTERM')
  t.same(g.exits, [], 'a SIGTERM within the second of a Ctrl-C is the same request')
  g.after(1_000)
  g.signal('SIGTERM')
  t.same(g.exits, [1], 'a second SIGTERM later: exit 1 at once')
  t.ok(g.log().some((line) => line.msg === 'second SIGTERM, exiting'))
  g.upstream.release()
  await inFlight
  // The drain goes on in process (a real process has ended): let it finish before the teardown.
  t.same(await g.exited(2), [1, 0])
})

// A hangup comes when a terminal closes (often just after its Ctrl-C), and from the kernel to a
// stopped process group whose parent went away. It stops the gateway as SIGTERM does, and never
// cuts a drain short.
t.test('a hangup drains like SIGTERM, and one during a drain changes nothing', async (t) => {
  for (const during of [false, true]) {
    const g = await started(t, during ? 'hangup while draining' : 'hangup')
    const { inFlight } = await g.hold('hangup')
    if (during) {
      g.signal('SIGTERM')
      g.after(1_500)
    }
    g.signal('SIGHUP')
    t.not(await eventually(HANG_TIMEOUT, async () => g.gateway.app.readiness.draining), null, 'draining')
    t.same(g.exits, [], 'it waits for the request in flight')
    g.upstream.release()
    t.equal(await inFlight, 200, 'the request in flight: 200')
    t.same(await g.exited(), [0], 'exit 0')
    const first = during ? 'SIGTERM' : 'SIGHUP'
    t.match(
      g.log().find((line) => line.msg === 'draining'),
      { signal: first },
      `draining on ${first}`,
    )
    t.same(
      g.log().filter((line) => line.level >= 50),
      [],
      'no error logged',
    )
  }
})

// An unhandled rejection is a bug somewhere: the gateway must not go on in an unknown state, nor die
// on the spot with its counts unflushed. It drains like a SIGTERM and exits 1.
t.test('an unhandled rejection: the gateway drains, flushes usage and exits 1', async (t) => {
  const g = await started(t, 'rejection', { LOG_LEVEL: 'warn' })
  g.upstream.release()
  const served = await callAs(g.base, g.parent.apiKey, { path: '/v1/orders' })
  t.equal(served.status, 200, 'a request is served before the rejection')
  for (let i = 1; i <= 2; i++)
    g.emit(
      'unhandledRejection',
      Object.assign(new Error(`planted ${i}: a rejection nobody handles`), { code: 'ECONNRESET' }),
    )
  t.same(await g.exited(), [1], 'exit 1, once')
  const errors = g.log().filter((line) => line.level >= 50)
  t.equal(errors.filter((line) => /closing after an error/.test(line.msg)).length, 1, 'it closes once')
  t.ok(
    errors.some((line) => /closing after an error/.test(line.msg) && JSON.stringify(line).includes('planted 1')),
    'it logs the first rejection as the reason it closes',
  )
  t.ok(
    errors.some((line) => /another unhandled rejection/.test(line.msg) && JSON.stringify(line).includes('planted 2')),
    'and the second one as such',
  )
  t.same(await usageByClass(g.db.sql, g.parent.id), { '2xx': 1 }, 'the request is counted, once')
})

t.test('a start that fails writes one line and exits 1', async (t) => {
  const exits: number[] = []
  let err = ''
  const gateway = await startGateway(
    { DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/postgres', MANAGEMENT_RATE: 'fast' },
    {
      stdout: { write: () => true },
      stderr: (text) => (err += text),
      exit: (code) => exits.push(code),
      on: () => t.fail('no listener before a start'),
    },
  )
  t.equal(gateway, null)
  t.same(exits, [1])
  t.match(err, /^invalid configuration: MANAGEMENT_RATE .*\n$/)
  t.equal(err.split('\n').length, 2, 'one line')
})

// AUTHZ_PORT (docs/forward-auth.md) listens with the gateway, decides, and closes with it on the
// drain, its decisions counted and flushed before the stores close; a port that cannot be had
// stops the start naming the variable.
t.test('AUTHZ_PORT decides while the gateway runs and closes with it; a taken one is named', async (t) => {
  const authzPort = await closedPort()
  const g = await started(t, 'authz', { AUTHZ_PORT: String(authzPort) })
  g.upstream.release()
  const authz = `http://127.0.0.1:${authzPort}`
  const decided = await callAs(authz, g.parent.apiKey, { path: '/envoy/v1/orders' })
  t.equal(decided.status, 200, 'a decision on AUTHZ_PORT')
  t.equal(decided.headers['x-service-key-id'], g.parent.keyId)
  t.equal((await callAs(g.base, g.parent.apiKey, { path: '/envoy/v1/orders' })).status, 200, 'PORT proxies the path')
  t.equal(g.upstream.received.at(-1)?.url, '/envoy/v1/orders', 'as a path like any other')
  g.signal('SIGTERM')
  t.same(await g.exited(), [0], 'exit 0')
  t.same(await usageByClass(g.db.sql, g.parent.id), { '2xx': 2 }, 'the decision and the request are counted')
  await t.rejects(callAs(authz, g.parent.apiKey, { path: '/envoy/v1/orders' }), { code: 'ECONNREFUSED' }, 'closed')

  const holder = createServer()
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => holder.close(() => resolve())))
  const taken = String((holder.address() as AddressInfo).port)
  await t.rejects(started(t, 'authz taken', { AUTHZ_PORT: taken }), {
    message: new RegExp(`AUTHZ_PORT=${taken} on HOST=127.0.0.1: the port is already in use`),
  })
})
