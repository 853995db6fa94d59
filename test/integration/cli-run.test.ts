// runCli (src/cli/run.ts) as the tests and the entry call it, in process: it reads only the
// variables it is given, never this process's, and a run leaves nothing behind (its Postgres pool
// and its Redis connection closed), whatever the outcome.
import t from 'tap'
import { runCliHere } from '../helpers/cli.js'
import { freshDatabase } from '../helpers/db.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { until } from '../helpers/poll.js'
import { REDIS_URL, redisPrefix } from '../helpers/redis.js'
import { REFUSED_PORT } from '../helpers/upstream.js'

const db = await freshDatabase(t)
const env = { DATABASE_URL: db.url, ENCRYPTION_KEY: TEST_ENCRYPTION_KEY, REDIS_URL, REDIS_KEY_PREFIX: redisPrefix(t) }

t.test("this process's variables are not read", async (t) => {
  const saved = { ...process.env }
  t.teardown(() => {
    for (const name of ['DATABASE_URL', 'ENCRYPTION_KEY', 'REDIS_URL']) {
      if (saved[name] === undefined) delete process.env[name]
      else process.env[name] = saved[name]
    }
  })
  process.env.DATABASE_URL = `postgres://postgres@127.0.0.1:${REFUSED_PORT}/nowhere`
  process.env.ENCRYPTION_KEY = TEST_ENCRYPTION_KEY
  delete process.env.REDIS_URL

  const made = await runCliHere(['accounts', 'create', '--name', 'env given'], env)
  t.equal(made.code, 0, `the given DATABASE_URL, not this process's unreachable one (stderr: ${made.stderr})`)
  const [row] = await db.sql`select name from tenants where id = ${JSON.parse(made.stdout).account.id}`
  t.equal(row?.name, 'env given', 'stored in the database given')

  const { ENCRYPTION_KEY: _, ...withoutKey } = env
  const refused = await runCliHere(['migrate'], withoutKey)
  t.equal(refused.code, 1, "no ENCRYPTION_KEY given: refused, though this process's has one")
  t.match(refused.stderr, /^error: invalid configuration: ENCRYPTION_KEY is required with DATABASE_URL/)
})

t.test('a run leaves no pool, connection or timer behind', async (t) => {
  const made = await runCliHere(['accounts', 'create', '--name', 'leaves nothing'], env)
  const account: string = JSON.parse(made.stdout).account.id
  const cliBackends = async () =>
    (
      await db.sql<{ count: number }[]>`
        select count(*)::int as count from pg_stat_activity
        where datname = current_database() and application_name like 'tenancy-gateway %'`
    )[0]!.count
  // What this process holds between runs: the test's own pool (its one connection in use since
  // the query above) and tap's pipes.
  const between = () => process.getActiveResourcesInfo().sort().join(', ')
  t.equal(await cliBackends(), 0, 'no CLI connection before')
  const before = between()

  const runs: [string[], Record<string, string>, number][] = [
    // Postgres, then Redis twice a second apart.
    [['accounts', 'limits', '--account', account, '--rate', '5/1s'], env, 0],
    // Redis refused: a warning, the change stands.
    [['accounts', 'limits', '--account', account, '--rate', '6/1s'], { ...env, REDIS_URL: 'redis://127.0.0.1:1' }, 0],
    // Refused after the pool was opened.
    [['keys', 'revoke', '--account', account, '--key', '00000000-0000-4000-8000-000000000000'], env, 1],
    // Refused before anything was opened.
    [['keys', 'roll', '--account', account], env, 1],
  ]
  for (const [args, runEnv, code] of runs) {
    const run = await runCliHere(args, runEnv)
    t.equal(run.code, code, `${args.slice(0, 2).join(' ')}: exit ${code} (stderr: ${run.stderr.trim()})`)
  }
  // postgres.js and ioredis finish closing their sockets on the server's answer: waited for, not timed.
  t.ok(await until(10_000, async () => (await cliBackends()) === 0), 'no Postgres connection of the CLI is left')
  t.ok(await until(10_000, async () => between() === before), `nothing more is held than before: ${between()}`)
})
