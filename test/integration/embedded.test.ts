// Embedded mode (docs/configuration.md): no DATABASE_URL, PGlite in DATA_DIR. The gateway is
// started the way the README says (`npm start`) and called over real HTTP; no Postgres server is
// involved.
import { execFile, spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { processIsAlive } from '../../src/shared/process-alive.js'
import { BOOTSTRAP_LINE, embeddedEnv, startEmbeddedGateway } from '../helpers/embedded-gateway.js'
import { sleep, until } from '../helpers/poll.js'
import { closedPort } from '../helpers/upstream.js'
import { startReceiver } from '../helpers/webhook-receiver.js'

const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url))

function runCli(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      'npm',
      ['run', '--silent', 'cli', '--', ...args],
      { cwd: REPO_ROOT, env: embeddedEnv(env), timeout: 60_000 },
      (err, stdout, stderr) => {
        const code = err === null ? 0 : typeof err.code === 'number' ? err.code : null
        resolve({ code, stdout, stderr })
      },
    )
  })
}

async function jwksKids(base: string): Promise<string[]> {
  const response = await fetch(`${base}/.well-known/jwks.json`)
  return ((await response.json()) as { keys: { kid: string }[] }).keys.map((key) => key.kid)
}

function api(base: string, apiKey: string, init: { method?: string; body?: unknown } = {}) {
  return fetch(`${base}/v1/sub-accounts`, {
    method: init.method ?? 'GET',
    headers: {
      authorization: `Bearer ${apiKey}`,
      ...(init.body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
  })
}

t.test('npm start on an empty DATA_DIR, the CLI locked out, a restart keeps everything', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'tgw-embedded-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))

  // First start: a bootstrap account and its key, printed once.
  const first = await startEmbeddedGateway(t, dataDir, { env: { WEBHOOKS_ALLOW_INSECURE: 'true' } })
  t.teardown(async () => {
    if (first.child.exitCode === null && first.child.signalCode === null) await first.stop().catch(() => {})
  })
  const [, accountId, apiKey] = await first.waitForStdout(BOOTSTRAP_LINE, 'the bootstrap line')
  await first.waitListening()
  // The CLI turned away while the gateway holds the database (checked below): started now, its
  // own start (npm, tsx) overlaps the calls in between, which leave the lock as it is.
  const lockedOut = runCli(['accounts', 'create', '--name', 'x'], { DATA_DIR: dataDir })
  const bootstrapLines = first
    .stdout()
    .split('\n')
    .filter((line) => line.startsWith('bootstrap'))
  t.equal(bootstrapLines.length, 1, 'one bootstrap line')
  t.match(bootstrapLines[0], BOOTSTRAP_LINE, 'a whole line of its own')
  t.ok(
    first.stdout().indexOf('Server listening') < first.stdout().indexOf('bootstrap'),
    'printed once the server listens',
  )
  t.equal(first.stdout().split(apiKey!).length - 1, 1, 'the key is printed exactly once (not in any log line)')
  // No UPSTREAM_URL and no route (as shipped): nothing is proxied, embedded or not.
  const unrouted = await fetch(`${first.base}/v1/shipments/1`, { headers: { authorization: `Bearer ${apiKey}` } })
  t.equal(unrouted.status, 404, 'a path no route takes')
  t.match(await unrouted.json(), { code: 'route_not_found' })
  // It stands in for `accounts create`: the audit log opens with its first key's event, by the operator.
  const opening = await fetch(`${first.base}/v1/sub-accounts/events`, {
    headers: { authorization: `Bearer ${apiKey}` },
  })
  const openingBody = (await opening.json()) as { data: { type: string; actor: unknown; account_id: string }[] }
  t.equal(opening.status, 200, JSON.stringify(openingBody))
  t.match(openingBody.data, [
    { type: 'api_key.created', account_id: accountId, actor: { type: 'operator', key_id: null } },
  ])
  t.equal(openingBody.data.length, 1, 'its only event')

  // No ENCRYPTION_KEY: the embedded database keeps its own, made on the first start.
  const keyFile = join(dataDir, 'encryption.key')
  t.equal(statSync(keyFile).mode & 0o777, 0o600, 'DATA_DIR/encryption.key, readable by its owner only')
  const encryptionKey = readFileSync(keyFile, 'utf8')
  const signingKeys = await jwksKids(first.base)
  t.equal(signingKeys.length, 1, 'one signing key, published')

  // Webhooks work on the embedded database too (its worker polls: it has no second connection to LISTEN on).
  const receiver = await startReceiver(t)
  const hook = await fetch(`${first.base}/v1/sub-accounts/webhook-endpoints`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${apiKey}`,
      'content-type': 'application/json',
      'x-service-acting-tenant': 'self',
    },
    body: JSON.stringify({ url: receiver.url, event_types: ['sub_account.created'] }),
  })
  receiver.secret(((await hook.json()) as { secret: string }).secret)
  t.equal(hook.status, 201)

  const created = await api(first.base, apiKey!, { method: 'POST', body: { name: 'first' } })
  const createdBody = (await created.json()) as { id: string; name: string }
  t.equal(created.status, 201, JSON.stringify(createdBody))
  t.equal(createdBody.name, 'first')
  // A cursor is signed with a secret the migrations keep in the embedded database: it outlives a restart.
  const secondCreated = await fetch(`${first.base}/v1/sub-accounts`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${apiKey}`,
      'content-type': 'application/json',
      'x-service-acting-tenant': 'self',
    },
    body: JSON.stringify({ name: 'second' }),
  })
  const secondId = ((await secondCreated.json()) as { id: string }).id
  const firstPage = await fetch(`${first.base}/v1/sub-accounts?limit=1`, {
    headers: { authorization: `Bearer ${apiKey}` },
  })
  const cursor = ((await firstPage.json()) as { next_cursor: string }).next_cursor
  t.type(cursor, 'string', 'a first page of one has a next cursor')
  t.ok(await until(10_000, async () => receiver.deliveries.length === 2), 'both creations delivered')
  // The request log is written to the embedded database too (as JSON: it takes no COPY).
  const logged = async () => {
    const response = await fetch(`${first.base}/v1/sub-accounts/requests?status=201`, {
      headers: { authorization: `Bearer ${apiKey}` },
    })
    return ((await response.json()) as { data: { id: string; path: string }[] }).data
  }
  t.ok(await until(10_000, async () => (await logged()).length >= 3), 'the creations are in the request log')
  t.match(await logged(), [{ path: '/v1/sub-accounts' }], 'as management requests')
  t.same(
    receiver.deliveries.map((d) => `${d.verified?.type} ${d.verified?.data.target.id}`).sort(),
    [createdBody.id, secondId].map((id) => `sub_account.created ${id}`).sort(),
    'signed, one for each',
  )

  // While the gateway holds the embedded database, the CLI refuses to touch it.
  t.ok(existsSync(join(dataDir, 'gateway.lock')), 'the gateway holds a lock file')
  const cli = await lockedOut
  t.ok(cli.code !== null && cli.code !== 0, `the CLI exits non-zero (got ${cli.code})`)
  t.equal(cli.stdout, '', 'nothing on stdout')
  const errLines = cli.stderr.split('\n')
  t.equal(errLines.length, 2, `one line on stderr: ${JSON.stringify(cli.stderr)}`)
  t.match(errLines[0], /embedded database .*in use/, 'it says the embedded database is in use')
  t.ok(existsSync(join(dataDir, 'gateway.lock')), 'the lock is still there')
  const stillServing = await api(first.base, apiKey!)
  await stillServing.arrayBuffer()
  t.equal(stillServing.status, 200, 'the gateway still serves after the CLI was turned away')

  // A SIGTERM to the group while the gateway is too busy to run (a loaded machine, here stopped
  // outright): nothing in the `npm start` chain kills it in the meantime, and it drains once it runs.
  const gatewayPid = (JSON.parse(readFileSync(join(dataDir, 'gateway.lock'), 'utf8')) as { pid: number }).pid
  process.kill(gatewayPid, 'SIGSTOP')
  process.kill(-first.child.pid!, 'SIGTERM')
  await sleep(500)
  let killedMeanwhile = false
  try {
    process.kill(gatewayPid, 'SIGCONT')
  } catch {
    killedMeanwhile = true
  }
  t.notOk(killedMeanwhile, 'still there after half a second stopped')
  await first.exited()
  t.match(first.stdout(), /"signal":"SIGTERM".*"msg":"draining"/, 'a graceful close on SIGTERM')
  // CI's summary shows the names of failed checks only: a failure's name carries the last output.
  const finished = /"msg":"closed"/.test(first.stdout())
  t.ok(finished, finished ? 'that finished' : `that finished; last: ${(first.stdout() + first.stderr()).slice(-600)}`)
  t.notOk(existsSync(join(dataDir, 'gateway.lock')), 'the lock file is removed on a clean stop')

  // Second start on the same DATA_DIR: no bootstrap, the earlier key and data are still there.
  const second = await startEmbeddedGateway(t, dataDir, { env: { WEBHOOKS_ALLOW_INSECURE: 'true' } })
  t.teardown(async () => {
    if (second.child.exitCode === null && second.child.signalCode === null) await second.stop().catch(() => {})
  })
  await second.waitListening()
  t.notMatch(second.stdout(), /bootstrap/, 'no bootstrap line on a second start')
  t.notMatch(second.stdout(), /tgw_[0-9A-Za-z]{49}/, 'no key printed at all')
  t.equal(readFileSync(keyFile, 'utf8'), encryptionKey, 'the encryption key file is kept')
  t.same(await jwksKids(second.base), signingKeys, 'the stored signing key opened under it, no new one')

  const listed = await api(second.base, apiKey!)
  const page = (await listed.json()) as { data: { id: string; name: string }[] }
  t.equal(listed.status, 200, 'the bootstrap key still works')
  t.same(
    page.data.map((s) => ({ id: s.id, name: s.name })),
    [
      { id: createdBody.id, name: 'first' },
      { id: secondId, name: 'second' },
    ],
    'the sub-accounts created before the restart are listed',
  )
  const resumed = await fetch(`${second.base}/v1/sub-accounts?limit=1&cursor=${cursor}`, {
    headers: { authorization: `Bearer ${apiKey}` },
  })
  const resumedBody = (await resumed.json()) as { data: { id: string }[] }
  t.equal(resumed.status, 200, `a cursor issued before the restart still works: ${JSON.stringify(resumedBody)}`)
  t.same(
    resumedBody.data?.map((s) => s.id),
    [secondId],
    'and resumes where it was issued',
  )
  t.match(accountId, /^[0-9a-f-]{36}$/)

  await second.stop()
  t.equal(
    second
      .stdout()
      .split('\n')
      .filter((l) => l.startsWith('bootstrap')).length,
    0,
  )
})

// Node 20 asserts in its own exit (ResetStdio) on a hung-up terminal and never ends: the
// gateway asks for 22.12 or later, and CI runs the image's.
const NODE_MAJOR = Number(process.versions.node.split('.')[0])
t.test(
  'its terminal closed: the gateway drains, exits and lets go of its lock',
  { skip: NODE_MAJOR < 22 && 'Node 20 hangs in its own exit on a hung-up terminal' },
  async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'tgw-embedded-'))
    t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
    // `script` runs `npm start` on a terminal of its own and holds the terminal's other end: killed,
    // it lets go of that end, and the kernel hangs the terminal up (a SIGHUP, then EIO for every
    // write), as when the window of a shell that ran `npm start` is closed.
    const terminal = spawn('script', ['--quiet', '--flush', '--command', 'npm start', '/dev/null'], {
      cwd: REPO_ROOT,
      stdio: ['pipe', 'pipe', 'pipe'],
      env: embeddedEnv({
        DATA_DIR: dataDir,
        PORT: String(await closedPort()),
        HOST: '127.0.0.1',
        LOG_LEVEL: 'info',
        METRICS_PORT: String(await closedPort()),
      }),
    })
    let shown = ''
    terminal.stdout.setEncoding('utf8').on('data', (chunk: string) => (shown += chunk))
    let gatewayPid = 0
    t.teardown(() => {
      terminal.kill('SIGKILL')
      if (gatewayPid !== 0 && processIsAlive(gatewayPid)) process.kill(gatewayPid, 'SIGKILL')
    })
    // Its signal handlers are set once it has started in full: the first start's key line is the last.
    const started = await until(60_000, async () => /bootstrap parent account /.test(shown), 50)
    t.ok(started, started ? 'the gateway serves on its terminal' : `it serves; shown: ${shown.slice(-600)}`)
    const lock = join(dataDir, 'gateway.lock')
    gatewayPid = (JSON.parse(readFileSync(lock, 'utf8')) as { pid: number }).pid

    terminal.kill('SIGKILL')
    // Its log can no longer be written: before, the gateway drained and then retried its last
    // line every 100 ms for ever, its lock kept.
    t.ok(await until(30_000, async () => !processIsAlive(gatewayPid), 50), 'the gateway exits within 30 s')
    const unlocked = !existsSync(lock)
    t.ok(unlocked, `the lock file is removed: it closed in full${unlocked ? '' : `; shown: ${shown.slice(-600)}`}`)
  },
)
