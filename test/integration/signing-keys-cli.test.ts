// Signing keys through what an operator runs (docs/credentials.md, Signing keys): the CLI's
// `signing-keys rotate [--compromised]` reaching two replicas over Redis within 1 s, and
// ENCRYPTION_KEY at the start of the gateway and of every CLI command: required with
// DATABASE_URL, made once in DATA_DIR without it, and a key that does not open the stored ones
// refused with one line, never replaced by new keys. The gateway starts as a process of its own;
// the CLI's commands run in process (test/helpers/cli.ts), each reading only the variables given.
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { FastifyInstance } from 'fastify'
import t, { type Test } from 'tap'
import { runCliHere } from '../helpers/cli.js'
import { freshDatabase } from '../helpers/db.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { startGateway, type TestGateway } from '../helpers/gateway.js'
import { eventually } from '../helpers/poll.js'
import { REDIS_URL, redisPrefix } from '../helpers/redis.js'
import { REFUSED_PORT } from '../helpers/upstream.js'
import { RUN_TYPESCRIPT } from '../helpers/typescript.js'

const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url))
const ISSUER = 'http://localhost:8080'
const VERIFY = { typ: 'at+jwt', issuer: ISSUER, audience: ISSUER, clockToleranceSeconds: 30 }
const OTHER_KEY = randomBytes(32).toString('base64')
const MISSING_KEY = /^(error: )?invalid configuration: ENCRYPTION_KEY is required with DATABASE_URL/
const WRONG_KEY = /ENCRYPTION_KEY does not decrypt the signing keys stored in the database/

interface ShownKey {
  kid: string
  status: string
  created_at: string
  activates_at: string
  published_until: string | null
}

interface Run {
  code: number | null
  stdout: string
  stderr: string
}

/** `node --import scripts/typescript.mjs <script> ...args` from the repository root, with only the given variables. */
function runNode(script: string, args: string[], env: Record<string, string>): Promise<Run> {
  const child = spawn(process.execPath, [...RUN_TYPESCRIPT, script, ...args], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', HOST: '127.0.0.1', LOG_LEVEL: 'warn', ...env },
  })
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000)
  return new Promise((resolve) =>
    child.once('close', (code) => {
      clearTimeout(timer)
      resolve({ code, stdout, stderr })
    }),
  )
}

/** A run that succeeded with one JSON object on stdout. */
function printed(t: Test, run: Run): Record<string, unknown> {
  t.equal(run.code, 0, `exit 0 (stderr: ${run.stderr.trim()})`)
  t.equal(run.stderr, '', 'nothing on stderr')
  t.equal(run.stdout.split('\n').length, 2, 'one line on stdout')
  return JSON.parse(run.stdout) as Record<string, unknown>
}

/** A run that failed with one line on stderr matching `message`, and nothing on stdout. */
function refused(t: Test, run: Run, message: RegExp): void {
  t.equal(run.code, 1, 'exit 1')
  t.equal(run.stdout, '', 'nothing on stdout')
  t.equal(run.stderr.split('\n').length, 2, `one line on stderr: ${JSON.stringify(run.stderr)}`)
  t.match(run.stderr.trimEnd(), message)
}

async function jwksKids(app: FastifyInstance): Promise<string[]> {
  const response = await app.inject({ method: 'GET', url: '/.well-known/jwks.json' })
  return (response.json() as { keys: { kid: string }[] }).keys.map((key) => key.kid)
}

const verifies = (gw: TestGateway, token: string): Promise<boolean> =>
  gw.app.keyring.verify(token, VERIFY).then(
    () => true,
    () => false,
  )

/** Polls `check` on both replicas until it holds on each; the instant (Date.now()) it last came true. */
async function onBoth(replicas: TestGateway[], check: (gw: TestGateway) => Promise<boolean>): Promise<number | null> {
  const seenAt: (number | null)[] = replicas.map(() => null)
  const done = await eventually(10_000, async () => {
    for (const [i, gw] of replicas.entries()) if (seenAt[i] === null && (await check(gw))) seenAt[i] = Date.now()
    return seenAt.every((at) => at !== null)
  })
  return done === null ? null : Math.max(...(seenAt as number[]))
}

t.test('signing-keys rotate and --compromised reach both replicas over Redis within 1 s', async (t) => {
  const db = await freshDatabase(t)
  const redisKeyPrefix = redisPrefix(t)
  const a = await startGateway(t, { listen: false, database: db, redisKeyPrefix })
  const b = await startGateway(t, { listen: false, database: db, redisKeyPrefix })
  const env = { DATABASE_URL: db.url, ENCRYPTION_KEY: TEST_ENCRYPTION_KEY, REDIS_URL, REDIS_KEY_PREFIX: redisKeyPrefix }
  const old = a.app.keyring.signingKey().kid
  t.equal(b.app.keyring.signingKey().kid, old, 'both replicas sign with the first key')

  // Both polls start with the CLI: it repeats its message after 1 s before it exits.
  const cli = runCliHere(['signing-keys', 'rotate'], env)
  const [cliRun, seen] = await Promise.all([cli, onBoth([a, b], async (gw) => (await jwksKids(gw.app)).length === 2)])
  const { signing_key: next } = printed(t, cliRun) as { signing_key: ShownKey }
  const createdAt = Date.parse(next.created_at)
  const lead = Date.parse(next.activates_at) - createdAt
  t.equal(next.status, 'next')
  t.ok(lead >= 10 * 60_000 && lead < 10 * 60_000 + 1_000, `signs 10 minutes later, on a whole second (${lead} ms)`)
  t.equal(next.published_until, null)
  t.not(seen, null, 'both replicas publish it')
  t.ok(seen! - createdAt <= 1_000, `within 1 s of the rotation (${seen! - createdAt} ms)`)
  for (const gw of [a, b]) {
    t.same(await jwksKids(gw.app), [next.kid, old])
    t.equal(gw.app.keyring.signingKey().kid, old, 'the old key still signs')
  }

  const token = (await a.app.keyring.sign({ iss: ISSUER, aud: ISSUER, sub: 'k' }, { typ: 'at+jwt', ttlSeconds: 900 }))
    .token
  t.ok((await verifies(a, token)) && (await verifies(b, token)), 'a token of the old key verifies on both')
  const compromised = runCliHere(['signing-keys', 'rotate', '--compromised'], env)
  const [compromisedRun, refusedAt] = await Promise.all([
    compromised,
    onBoth([a, b], async (gw) => !(await verifies(gw, token))),
  ])
  const output = printed(t, compromisedRun) as {
    signing_key: ShownKey
    withdrawn: { kid: string; withdrawn_at: string }[]
  }
  t.equal(output.signing_key.status, 'active', 'a fresh key signs at once')
  t.same(
    output.withdrawn.map((w) => w.kid),
    [old, next.kid],
    'the old key is withdrawn, and the next one made beside it',
  )
  t.not(refusedAt, null, 'both replicas refuse the old key')
  const withdrawnAt = Date.parse(output.withdrawn[0]!.withdrawn_at)
  t.ok(refusedAt! - withdrawnAt <= 1_000, `within 1 s of the withdrawal (${refusedAt! - withdrawnAt} ms)`)
  for (const gw of [a, b]) {
    t.same(await jwksKids(gw.app), [output.signing_key.kid], 'the JWKS lists only the fresh key')
    t.notOk(gw.app.keyring.accepts(old))
    t.equal(gw.app.keyring.signingKey().kid, output.signing_key.kid)
  }
  const fresh = await b.app.keyring.sign({ iss: ISSUER, aud: ISSUER, sub: 'k' }, { typ: 'at+jwt', ttlSeconds: 900 })
  t.ok(await verifies(a, fresh.token), 'what one replica signs now verifies on the other')
})

t.test('signing-keys rotate with Redis down: rotated, and a warning that names REDIS_URL', async (t) => {
  const db = await freshDatabase(t)
  const run = await runCliHere(['signing-keys', 'rotate'], {
    DATABASE_URL: db.url,
    ENCRYPTION_KEY: TEST_ENCRYPTION_KEY,
    REDIS_URL: `redis://127.0.0.1:${REFUSED_PORT}`,
  })
  t.equal(run.code, 0, 'the rotation itself succeeded')
  t.equal(JSON.parse(run.stdout).signing_key.status, 'active', 'the first key of this database')
  t.match(
    run.stderr,
    new RegExp(`^warning: the new key is published, but Redis \\(REDIS_URL, 127\\.0\\.0\\.1:${REFUSED_PORT}\\)`),
  )
  t.equal(run.stderr.split('\n').length, 2, 'one line')
})

t.test('with DATABASE_URL, the gateway and every CLI command refuse to start without ENCRYPTION_KEY', async (t) => {
  const db = await freshDatabase(t, { migrated: false })
  const gateway = await runNode('src/main.ts', [], { DATABASE_URL: db.url, PORT: '0', METRICS_PORT: '0' })
  refused(t, gateway, MISSING_KEY)
  for (const args of [['migrate'], ['accounts', 'create', '--name', 'x'], ['signing-keys', 'rotate']]) {
    refused(t, await runCliHere(args, { DATABASE_URL: db.url }), MISSING_KEY)
  }
  const [row] = await db.sql<{ exists: boolean }[]>`select to_regclass('schema_migrations') is not null as exists`
  t.notOk(row!.exists, 'not a step was taken: no migration ran')
})

t.test('another ENCRYPTION_KEY: one line naming it, and no new key', async (t) => {
  const db = await freshDatabase(t)
  const gw = await startGateway(t, { listen: false, database: db, redis: false })
  const kid = gw.app.keyring.signingKey().kid
  await gw.close()

  const env = { DATABASE_URL: db.url, ENCRYPTION_KEY: OTHER_KEY }
  const gateway = await runNode('src/main.ts', [], { ...env, PORT: '0', METRICS_PORT: '0' })
  refused(t, gateway, new RegExp(`^gateway failed to start: ${WRONG_KEY.source}`))
  refused(t, await runCliHere(['signing-keys', 'rotate'], env), new RegExp(`^error: ${WRONG_KEY.source}`))
  refused(t, await runCliHere(['signing-keys', 'rotate', '--compromised'], env), WRONG_KEY)
  const rows = await db.sql<{ kid: string; withdrawn_at: Date | null }[]>`select kid, withdrawn_at from signing_keys`
  t.same(rows, [{ kid, withdrawn_at: null }], 'the one key, untouched')

  const again = await startGateway(t, { listen: false, database: db, redis: false })
  t.equal(again.app.keyring.signingKey().kid, kid, 'the right key still opens it')
})

t.test('embedded mode: DATA_DIR/encryption.key made once, 0600, and used again', async (t) => {
  const dataDir = t.testdir({})
  const keyFile = join(dataDir, 'encryption.key')
  const first = printed(t, await runCliHere(['signing-keys', 'rotate'], { DATA_DIR: dataDir }))
  t.equal((first.signing_key as { status: string }).status, 'active', 'on an empty database the key signs at once')
  t.equal(statSync(keyFile).mode & 0o777, 0o600, 'readable by its owner only')
  const made = readFileSync(keyFile, 'utf8')
  t.equal(Buffer.from(made.trim(), 'base64').length, 32, '32 bytes in base64')

  const second = printed(t, await runCliHere(['signing-keys', 'rotate'], { DATA_DIR: dataDir }))
  t.equal((second.signing_key as { status: string }).status, 'next', 'the stored key opened under the same file')
  t.equal(readFileSync(keyFile, 'utf8'), made, 'the file is kept')

  writeFileSync(keyFile, `${OTHER_KEY}\n`)
  refused(t, await runCliHere(['signing-keys', 'rotate'], { DATA_DIR: dataDir }), WRONG_KEY)
})
