// What a newcomer meets in the first hour: the gateway's start (in process, src/start.ts, as
// src/main.ts runs it) against a Postgres that refuses or does not answer, on a port already
// taken, with a broken route table;
// the CLI's help and its errors; a key sent without `Bearer `. Each message must say what is
// wrong and which variable to change, and never show a password.
import { spawn } from 'node:child_process'
import { EventEmitter } from 'node:events'
import { connect, createServer, type AddressInfo, type Socket } from 'node:net'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { createParentWithKey } from '../../src/auth/mint.js'
import { NOTHING_TO_PROXY, startGateway } from '../../src/start.js'
import { freshDatabase } from '../helpers/db.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { startGateway as startTestGateway } from '../helpers/gateway.js'
import { until } from '../helpers/poll.js'
import { problemOf } from '../helpers/problems.js'
import { closedPort, listenOnLoopback } from '../helpers/upstream.js'
import { RUN_TYPESCRIPT } from '../helpers/typescript.js'

const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url))
const PASSWORD = 'sekret-do-not-print'

interface Run {
  code: number | null
  stdout: string
  stderr: string
  ms: number
}

/**
 * A loopback port whose connections hang before the TCP handshake ends, like a host that drops
 * packets: a listener with a backlog of one, in a process whose event loop is blocked so that it
 * never accepts, and its queue filled. Stays on this machine (no unroutable address is dialled).
 */
async function silentPort(t: Test): Promise<number> {
  const listener = spawn(
    process.execPath,
    [
      '-e',
      "require('net').createServer().listen({ port: 0, host: '127.0.0.1', backlog: 1 }, function () { console.log(this.address().port); Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0) })",
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  )
  t.teardown(() => {
    listener.kill('SIGKILL')
  })
  const port = await new Promise<number>((resolve) =>
    listener.stdout.once('data', (data) => resolve(Number(String(data).trim()))),
  )
  const fillers: Socket[] = []
  for (let i = 0; i < 4; i++) fillers.push(connect(port, '127.0.0.1').on('error', () => {}))
  t.teardown(() => {
    for (const socket of fillers) socket.destroy()
  })
  await new Promise((resolve) => setTimeout(resolve, 300))
  return port
}

/**
 * `node --import scripts/typescript.mjs <script> ...args` from the repository root, with only the given variables.
 * It is killed after `timeoutMs`, or as soon as `stopWhen` (polled) holds: the run's `code` is then null.
 */
function runNode(
  script: string,
  args: string[],
  env: Record<string, string>,
  timeoutMs = 60_000,
  stopWhen?: (run: { stdout: string; stderr: string }) => Promise<boolean>,
): Promise<Run> {
  const started = Date.now()
  const child = spawn(process.execPath, [...RUN_TYPESCRIPT, script, ...args], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      ENCRYPTION_KEY: TEST_ENCRYPTION_KEY,
      ...env,
    },
  })
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
  let closed = false
  if (stopWhen !== undefined)
    void until(timeoutMs, async () => closed || (await stopWhen({ stdout, stderr })), 50).then(() => {
      if (!closed) child.kill('SIGKILL')
    })
  return new Promise((resolve) =>
    child.once('close', (code) => {
      closed = true
      clearTimeout(timer)
      resolve({ code, stdout, stderr, ms: Date.now() - started })
    }),
  )
}

/**
 * The gateway's start in process (src/start.ts, as `src/main.ts` runs it), with only the given
 * variables: what it writes, and the exit it asks for. A start that succeeds runs until `stopWhen`
 * holds (polled, at most `timeoutMs`), then gets a SIGTERM and drains: its `code` is then null.
 */
async function startInProcess(
  env: Record<string, string>,
  timeoutMs = 60_000,
  stopWhen?: (run: { stdout: string; stderr: string }) => Promise<boolean>,
): Promise<Run> {
  const started = Date.now()
  let stdout = ''
  let stderr = ''
  const exits: number[] = []
  const signals = new EventEmitter()
  const gateway = await startGateway(
    { HOST: '127.0.0.1', LOG_LEVEL: 'warn', ENCRYPTION_KEY: TEST_ENCRYPTION_KEY, ...env },
    {
      stdout: { write: (text: string) => (stdout += text) },
      stderr: (text) => (stderr += text),
      exit: (code) => exits.push(code),
      on: (event, listener) => signals.on(event, listener),
    },
  )
  if (gateway === null) return { code: exits[0] ?? null, stdout, stderr, ms: Date.now() - started }
  const running = exits.length === 0
  await until(
    timeoutMs,
    async () => exits.length > 0 || (stopWhen !== undefined && (await stopWhen({ stdout, stderr }))),
    50,
  )
  signals.emit('SIGTERM', 'SIGTERM')
  await until(timeoutMs, async () => exits.length > 0, 20)
  return { code: running ? null : (exits[0] ?? null), stdout, stderr, ms: Date.now() - started }
}

/** A TCP server on 127.0.0.1 that accepts connections and never answers (a Postgres that hangs). */
async function silentServer(t: Test): Promise<number> {
  return (
    await listenOnLoopback(
      t,
      createServer((socket) => socket.on('error', () => {})),
    )
  ).port
}

const db = await freshDatabase(t)

// Several starts wait for a timeout: four at a time.
t.test('the gateway at start', { jobs: 4 }, async (t) => {
  t.test('a Postgres that refuses: names Postgres, DATABASE_URL and where, never the password', async (t) => {
    const port = await closedPort()
    const run = await startInProcess({
      DATABASE_URL: `postgres://postgres:${PASSWORD}@127.0.0.1:${port}/gateway`,
    })
    t.equal(run.code, 1, 'exit 1')
    t.match(
      run.stderr,
      /^gateway failed to start: cannot reach Postgres at 127\.0\.0\.1:\d+\/gateway \(DATABASE_URL\): connect ECONNREFUSED/,
    )
    t.match(run.stderr, `127.0.0.1:${port}`)
    t.notMatch(run.stderr, PASSWORD, 'the password is not printed')
  })

  t.test('a database that does not exist: named, with how to make it, not "cannot reach"', async (t) => {
    const url = new URL(db.url)
    url.pathname = '/tgw_no_such_database'
    const run = await startInProcess({ DATABASE_URL: url.href })
    t.equal(run.code, 1, 'exit 1')
    t.match(
      run.stderr,
      /^gateway failed to start: Postgres at 127\.0\.0\.1:\d+\/tgw_no_such_database answers but has no database "tgw_no_such_database" \(DATABASE_URL\): create it \(createdb tgw_no_such_database\) or name one that exists/,
    )
  })

  t.test('a Postgres that accepts and never answers: a message, not a hang', async (t) => {
    const port = await silentServer(t)
    const run = await startInProcess(
      { DATABASE_URL: `postgres://postgres:${PASSWORD}@127.0.0.1:${port}/gateway` },
      45_000,
    )
    t.equal(run.code, 1, `exit 1 (after ${run.ms} ms)`)
    t.match(
      run.stderr,
      `gateway failed to start: cannot reach Postgres at 127.0.0.1:${port}/gateway (DATABASE_URL): no answer within 5 s`,
    )
    t.notMatch(run.stderr, PASSWORD, 'the password is not printed')
  })

  // A host that drops packets: postgres.js used to retry for minutes in silence.
  t.test('a host that does not answer: a message within the first-contact timeout', async (t) => {
    const port = await silentPort(t)
    const run = await startInProcess(
      { DATABASE_URL: `postgres://postgres:${PASSWORD}@127.0.0.1:${port}/gateway` },
      45_000,
    )
    t.equal(run.code, 1, `exit 1 (after ${run.ms} ms)`)
    // It gave up on a deadline of its own (the run's 45 s would have killed a hang): said by its
    // reason, not timed here, since a loaded machine starts the process itself slowly.
    t.match(
      run.stderr,
      new RegExp(
        `^gateway failed to start: cannot reach Postgres at 127\\.0\\.0\\.1:${port}/gateway \\(DATABASE_URL\\): no answer within \\d+ s`,
      ),
      `it gave up on its own deadline (after ${run.ms} ms)`,
    )
    t.notMatch(run.stderr, PASSWORD, 'the password is not printed')
  })

  for (const variable of ['METRICS_PORT', 'PORT'] as const) {
    t.test(`${variable} already in use: names ${variable}`, async (t) => {
      const holder = createServer()
      await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve))
      t.teardown(() => new Promise((resolve) => holder.close(resolve)))
      const taken = (holder.address() as AddressInfo).port
      const free = await closedPort()
      const ports =
        variable === 'PORT'
          ? { PORT: String(taken), METRICS_PORT: String(free) }
          : { PORT: String(free), METRICS_PORT: String(taken) }
      const run = await startInProcess({ DATABASE_URL: db.url, ...ports })
      t.equal(run.code, 1, 'exit 1')
      t.match(
        run.stderr,
        `gateway failed to start: ${variable}=${taken} on HOST=127.0.0.1: the port is already in use; stop what holds it or set ${variable} to another`,
      )
    })
  }

  t.test('HOST that is no address and resolves to none: names HOST', async (t) => {
    const run = await startInProcess({ DATABASE_URL: db.url, HOST: '999.1.1.1', PORT: '0', METRICS_PORT: '0' })
    t.equal(run.code, 1, 'exit 1')
    t.match(
      run.stderr,
      /^gateway failed to start: METRICS_PORT=0 on HOST=999\.1\.1\.1: HOST is neither an IP address nor a name this machine resolves; set HOST to/,
    )
    t.notMatch(run.stderr, /getaddrinfo/, "not Node's words alone")
  })

  // The machine's Redis (or TEST_REDIS_URL's server): database 99 does not exist on a default
  // server, and neither does a user named "bob".
  const redisBase = new URL(process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379')
  const redisAt = (auth: string, database: string) =>
    `redis://${auth}${redisBase.hostname}:${redisBase.port || '6379'}/${database}`
  for (const [what, url, refusal] of [
    ['a database the server does not have (/99)', redisAt('', '99'), /ERR DB index is out of range/],
    ['a user or password the server refuses', redisAt(`bob:${PASSWORD}@`, '0'), /WRONGPASS/],
  ] as const) {
    t.test(`REDIS_URL with ${what}: a startup error naming REDIS_URL, never database 0`, async (t) => {
      const run = await startInProcess({
        DATABASE_URL: db.url,
        REDIS_URL: url,
        PORT: '0',
        METRICS_PORT: '0',
      })
      t.equal(run.code, 1, 'exit 1')
      t.match(run.stderr, /^gateway failed to start: REDIS_URL \(redis:\/\/[^ ]+\) was refused by the server: /)
      t.match(run.stderr, refusal)
      t.match(run.stderr, 'fix REDIS_URL or the server')
      t.notMatch(run.stderr, PASSWORD, 'the password is not printed')
    })
  }

  t.test('REDIS_URL that does not answer: the gateway starts without Redis, and says so', async (t) => {
    const port = await closedPort()
    const gatewayPort = await closedPort()
    // Stopped once it answers on its port (it started), rather than after a fixed wait.
    let answered = false
    const run = await startInProcess(
      {
        DATABASE_URL: db.url,
        REDIS_URL: `redis://:${PASSWORD}@127.0.0.1:${port}/0`,
        PORT: String(gatewayPort),
        METRICS_PORT: '0',
      },
      30_000,
      async () =>
        (answered = await fetch(`http://127.0.0.1:${gatewayPort}/healthz`).then(
          (res) => res.status === 200,
          () => false,
        )),
    )
    t.ok(answered, 'it started: /healthz answered 200')
    t.equal(run.code, null, 'still running when the test stopped it')
    t.match(run.stderr, `warning: REDIS_URL (redis://127.0.0.1:${port}/0) did not answer; starting without Redis`)
    t.notMatch(run.stderr, 'failed to start')
    t.notMatch(run.stderr, PASSWORD, 'the password is not printed')
  })

  t.test('no route and no UPSTREAM_URL: a warning that nothing is proxied, once listening', async (t) => {
    const started = (stdout: string) => /nothing to proxy|Server listening/.test(stdout)
    const bare = await startInProcess({ DATABASE_URL: db.url, PORT: '0', METRICS_PORT: '0' }, 30_000, async (run) =>
      /nothing to proxy/.test(run.stdout),
    )
    t.equal(bare.code, null, 'it starts all the same')
    const warnings = bare.stdout
      .split('\n')
      .filter((line) => line.includes('nothing to proxy'))
      .map((line) => {
        const { level, msg } = JSON.parse(line) as { level: number; msg: string }
        return { level, msg }
      })
    t.same(warnings, [{ level: 40, msg: NOTHING_TO_PROXY }], 'one warning')
    t.match(NOTHING_TO_PROXY, /no routes and UPSTREAM_URL is not set.*404 route_not_found: set UPSTREAM_URL/)

    const upstreamPort = await closedPort()
    const proxying = await startInProcess(
      {
        DATABASE_URL: db.url,
        PORT: '0',
        METRICS_PORT: '0',
        LOG_LEVEL: 'info',
        UPSTREAM_URL: `http://127.0.0.1:${upstreamPort}`,
      },
      30_000,
      async (run) => started(run.stdout),
    )
    t.match(proxying.stdout, 'Server listening', 'with UPSTREAM_URL: listening')
    t.notMatch(proxying.stdout, 'nothing to proxy', 'and no warning')
  })

  t.test('a YAML error in the route table shows the line at fault', async (t) => {
    const dir = t.testdir({})
    const file = join(dir, 'gateway.yaml')
    writeFileSync(file, 'routes:\n  - prefix: /v1/a\n    upstream: http://a\n   misplaced: here\n')
    const run = await startInProcess({ DATABASE_URL: db.url, GATEWAY_CONFIG: file })
    t.equal(run.code, 1, 'exit 1')
    t.equal(run.stderr.split('\n').length, 2, 'one line')
    t.match(
      run.stderr,
      /^invalid configuration: GATEWAY_CONFIG is not valid YAML \(.*\): .* at line 4, column 1: " {3}misplaced: here"\n$/,
      'the line at fault, quoted',
    )
  })

  // The parser reports an unclosed quote or bracket where it gave up: at the end of the file, or
  // on the next line. The line quoted is the one where it opened (line 3 here, of 5).
  for (const [opener, what, line3] of [
    ['"', 'quote', '    upstream: "http://a'],
    ['[', 'bracket', '    scopes: [tracking:read'],
  ] as const) {
    // Named apart in words: t.testdir's folder is the name without its punctuation.
    t.test(`an unclosed ${what} (${opener}) in the route table: the line where it opened, quoted`, async (t) => {
      const dir = t.testdir({})
      const file = join(dir, 'gateway.yaml')
      writeFileSync(file, `routes:\n  - prefix: /v1/a\n${line3}\n  - prefix: /v1/b\n    upstream: http://b\n`)
      const run = await startInProcess({ DATABASE_URL: db.url, GATEWAY_CONFIG: file })
      t.equal(run.code, 1, 'exit 1')
      t.equal(run.stderr.split('\n').length, 2, 'one line')
      const at = `line 3, column ${line3.indexOf(opener) + 1}`
      t.match(
        run.stderr,
        `; the ${opener} opened at ${at} is never closed: ${JSON.stringify(line3)}\n`,
        'line 3, quoted',
      )
    })
  }
})

t.test('the CLI', { jobs: 4 }, async (t) => {
  const env = { DATABASE_URL: db.url }
  for (const args of [['--help'], ['-h'], ['help'], ['keys', 'create', '--help']]) {
    t.test(`cli ${args.join(' ')}: the usage on stdout, exit 0`, async (t) => {
      const run = await runNode('src/cli.ts', args, env)
      t.equal(run.code, 0)
      t.equal(run.stderr, '')
      t.match(run.stdout, /^usage: cli <command> \[options\]\n/)
      t.ok(run.stdout.split('\n').length > 5, 'one command a line, not squeezed together')
      for (const command of ['migrate', 'accounts create', 'keys create', 'keys revoke'])
        t.match(run.stdout, `\n  ${command}`)
    })
  }

  t.test('npm run cli -- --help works as the usage says', async (t) => {
    const run = await new Promise<Run>((resolve) => {
      const started = Date.now()
      const child = spawn('npm', ['run', '--silent', 'cli', '--', '--help'], {
        cwd: REPO_ROOT,
        env: { ...process.env, ENCRYPTION_KEY: TEST_ENCRYPTION_KEY, ...env },
      })
      let stdout = ''
      let stderr = ''
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
      child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
      child.once('close', (code) => resolve({ code, stdout, stderr, ms: Date.now() - started }))
    })
    t.equal(run.code, 0)
    t.match(run.stdout, /^usage: cli/)
  })

  const failures: [string[], Record<string, string>, RegExp][] = [
    [
      ['frobnicate'],
      env,
      /^error: unknown command "frobnicate"; the commands are migrate, accounts create, accounts limits, accounts scopes, accounts placement, accounts portal-origins, accounts leak-policy, keys create, keys revoke, keys roll, keys import, usage export, usage reconcile, signing-keys rotate \(--help for the usage\)$/,
    ],
    [[], env, /^error: a command is required: .*--help/],
    [['accounts', 'create'], env, /^error: --name is required$/],
    [['accounts', 'create', '--name', 'x', '--colour', 'red'], env, /^error: Unknown option '--colour'/],
    [['migrate'], { LOG_LEVEL: 'loud', DATABASE_URL: db.url }, /^error: invalid configuration: LOG_LEVEL /],
    [
      ['migrate'],
      { DATABASE_URL: `postgres://postgres:${PASSWORD}@127.0.0.1:1/x` },
      /^error: cannot reach Postgres at 127\.0\.0\.1:1\/x \(DATABASE_URL\)/,
    ],
  ]
  for (const [args, runEnv, message] of failures) {
    t.test(`cli ${args.join(' ') || '(nothing)'}: one line starting with "error: "`, async (t) => {
      const run = await runNode('src/cli.ts', args, runEnv)
      t.equal(run.code, 1)
      t.equal(run.stdout, '')
      t.equal(run.stderr.split('\n').length, 2, `one line: ${JSON.stringify(run.stderr)}`)
      t.match(run.stderr.trimEnd(), message)
      t.notMatch(run.stderr, PASSWORD)
    })
  }
})

t.test('cli keys revoke with Redis down: revoked, and a warning that names Redis and REDIS_URL', async (t) => {
  const { account, key } = await db.sql.begin((tx) =>
    createParentWithKey(tx, { name: 'revoke', externalId: null, extraScopes: [] }),
  )
  const port = await closedPort()
  const run = await runNode('src/cli.ts', ['keys', 'revoke', '--account', account.id, '--key', key.row.id], {
    DATABASE_URL: db.url,
    REDIS_URL: `redis://:${PASSWORD}@127.0.0.1:${port}`,
  })
  t.equal(run.code, 0, 'the revocation itself succeeded')
  t.equal(JSON.parse(run.stdout).key.id, key.row.id)
  t.match(
    run.stderr,
    new RegExp(
      `^warning: the key is revoked, but Redis \\(REDIS_URL, 127\\.0\\.0\\.1:${port}\\) could not tell the replicas at once`,
    ),
  )
  t.equal(run.stderr.split('\n').length, 2, `one line: ${JSON.stringify(run.stderr)}`)
  t.notMatch(run.stderr, PASSWORD)
})

t.test('a key sent without "Bearer ": 401 that says the scheme is missing', async (t) => {
  const gw = await startTestGateway(t, { listen: false })
  const parent = await gw.createParent()
  const bare = await gw.app.inject({
    method: 'GET',
    url: '/v1/sub-accounts',
    headers: { authorization: parent.apiKey },
  })
  t.equal(bare.statusCode, 401)
  t.equal(bare.headers['www-authenticate'], 'Bearer')
  const body = problemOf(bare)
  t.equal(body.code, 'unauthenticated')
  t.equal(body.detail, 'the Authorization header has no scheme: send Authorization: Bearer <key>')

  // A Bearer value that is not a well-formed key is "malformed"; another scheme is named, with
  // what to send instead (error-messages.test.ts has the rest).
  for (const authorization of ['Bearer tgw_short', 'Bearer', 'bearer a b']) {
    const response = await gw.app.inject({ method: 'GET', url: '/v1/sub-accounts', headers: { authorization } })
    t.equal(response.statusCode, 401, authorization)
    t.match(problemOf(response).detail, /^the API key is malformed: /, `${authorization}: malformed`)
  }
  for (const [authorization, scheme] of [
    [`Basic ${parent.apiKey}`, 'is Basic, not Bearer'],
    ['Basic', 'is Basic, not Bearer'],
    ['Token', 'is not Bearer'],
  ] as const) {
    const response = await gw.app.inject({ method: 'GET', url: '/v1/sub-accounts', headers: { authorization } })
    t.equal(response.statusCode, 401, authorization)
    t.match(problemOf(response).detail, `the Authorization scheme ${scheme}: send the API key as`, authorization)
  }
  const ok = await gw.call(parent.apiKey, { method: 'GET', url: '/v1/sub-accounts', acting: 'self' })
  t.equal(ok.statusCode, 200, 'the same key with its scheme is accepted')
})
