// What the gateway says of a Redis deployment it cannot use, in Sentinel and Cluster modes
// (docs/operations.md): sentinels that do not monitor REDIS_SENTINEL_NAME, or an address in
// REDIS_SENTINELS that is a plain server, answered and refused, a startup error naming the
// variable; and while Redis is away, one warning a minute, naming the variable in use. A
// redis-server and a sentinel of the test's own (`redis-server --sentinel`, what Debian's
// redis-sentinel runs).
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { Redis } from 'ioredis'
import { pino } from 'pino'
import t, { type Test } from 'tap'
import { TenancyCache } from '../../src/cache/index.js'
import { checkRedisAtStart, RedisRefused } from '../../src/cache/redis-connection.js'
import { loadConfig } from '../../src/config.js'
import { createMetrics } from '../../src/ops/metrics.js'
import { postgresLookups } from '../../src/store/tenancy-lookups.js'
import { freshDatabase } from '../helpers/db.js'
import { startRedis } from '../helpers/own-redis.js'
import { until } from '../helpers/poll.js'
import { stablePort } from '../helpers/ports.js'

const MASTER_NAME = 'tgwrefusals'

const server = await startRedis(t)

/** One sentinel monitoring `server` as MASTER_NAME (quorum 1), killed at teardown. */
async function startSentinel(t: Test, password?: string): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'tgw-refusals-sentinel-'))
  const port = await stablePort()
  const file = join(dir, 'sentinel.conf')
  writeFileSync(
    file,
    [
      `port ${port}`,
      'bind 127.0.0.1',
      `dir ${dir}`,
      `sentinel monitor ${MASTER_NAME} 127.0.0.1 ${server.port} 1`,
      ...(password === undefined ? [] : [`requirepass ${password}`]),
      '',
    ].join('\n'),
  )
  const child = spawn('/usr/bin/redis-server', [file, '--sentinel', '--loglevel', 'warning'], { stdio: 'ignore' })
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  t.teardown(async () => {
    child.kill('SIGKILL')
    await exited
    rmSync(dir, { recursive: true, force: true })
  })
  const answers = await until(10_000, async () => {
    const probe = new Redis({ port, host: '127.0.0.1', password, lazyConnect: true, retryStrategy: () => null })
    probe.on('error', () => {
      // Not up yet: asked again.
    })
    try {
      return (await probe.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', MASTER_NAME).catch(() => null)) !== null
    } finally {
      probe.disconnect()
    }
  })
  if (!answers) throw new Error(`the sentinel on port ${port} did not name ${MASTER_NAME} within 10 s`)
  return port
}

async function refusal(env: Record<string, string>): Promise<unknown> {
  return checkRedisAtStart(loadConfig(env).redis!).catch((err: unknown) => err)
}

t.test('sentinels that answer and refuse: a startup error naming the variable to fix', async (t) => {
  const sentinel = await startSentinel(t)
  t.equal(
    await checkRedisAtStart(
      loadConfig({ REDIS_SENTINELS: `127.0.0.1:${sentinel}`, REDIS_SENTINEL_NAME: MASTER_NAME }).redis!,
    ),
    'reachable',
    'the name they monitor: reachable',
  )

  const unknownName = await refusal({ REDIS_SENTINELS: `127.0.0.1:${sentinel}`, REDIS_SENTINEL_NAME: 'othermaster' })
  t.ok(unknownName instanceof RedisRefused, `a name they do not monitor is refused: ${String(unknownName)}`)
  t.match(String(unknownName), /^RedisRefused: REDIS_SENTINEL_NAME \(othermaster\) is not a master set/)
  t.match(String(unknownName), new RegExp(`they monitor: ${MASTER_NAME}`), 'and says which they monitor')

  const plainServer = await refusal({ REDIS_SENTINELS: `127.0.0.1:${server.port}`, REDIS_SENTINEL_NAME: MASTER_NAME })
  t.ok(plainServer instanceof RedisRefused, `a plain server as a sentinel is refused: ${String(plainServer)}`)
  t.match(
    String(plainServer),
    new RegExp(`^RedisRefused: REDIS_SENTINELS \\(.*\\) names 127.0.0.1:${server.port}, which is not a sentinel`),
  )
  t.match(String(plainServer), /unknown command/, "with the server's own words")

  // A plain server among real sentinels is refused all the same: it is a mistake, not an outage.
  const mixed = await refusal({
    REDIS_SENTINELS: `127.0.0.1:${sentinel},127.0.0.1:${server.port}`,
    REDIS_SENTINEL_NAME: MASTER_NAME,
  })
  t.ok(mixed instanceof RedisRefused, 'one plain server among the sentinels is refused')

  // A sentinel that refuses the password (REDIS_URL's, which the gateway gives the sentinels too).
  const guarded = await startSentinel(t, 'sekrit')
  const wrongPassword = await refusal({
    REDIS_SENTINELS: `127.0.0.1:${guarded}`,
    REDIS_SENTINEL_NAME: MASTER_NAME,
    REDIS_URL: 'redis://:wrong@',
  })
  t.match(
    String(wrongPassword),
    /^RedisRefused: REDIS_SENTINELS \(.*\) was refused by the server: a sentinel refused: WRONGPASS.*fix REDIS_SENTINELS or REDIS_URL \(its credentials\)/,
    'a sentinel that refuses the password: refused, naming both variables',
  )

  // No sentinel answering at all is an outage, not a refusal: the gateway starts degraded.
  const nobody = await stablePort()
  t.equal(
    await checkRedisAtStart(
      loadConfig({ REDIS_SENTINELS: `127.0.0.1:${nobody}`, REDIS_SENTINEL_NAME: MASTER_NAME }).redis!,
    ),
    'unreachable',
    'sentinels that do not answer: unreachable',
  )
})

t.test('Redis away: one warning, naming the variable in use, not one each attempt', async (t) => {
  const database = await freshDatabase(t)
  const nobody = await stablePort()
  for (const [env, variable] of [
    [{ REDIS_SENTINELS: `127.0.0.1:${nobody}`, REDIS_SENTINEL_NAME: MASTER_NAME }, 'REDIS_SENTINELS'],
    [{ REDIS_CLUSTER_NODES: `127.0.0.1:${nobody}` }, 'REDIS_CLUSTER_NODES'],
  ] as const) {
    const lines: string[] = []
    const log = pino(
      { level: 'warn' },
      new Writable({
        write(chunk: Buffer, _encoding, done) {
          lines.push((JSON.parse(chunk.toString()) as { msg: string }).msg)
          done()
        },
      }),
    )
    const metrics = createMetrics().cache
    const cache = new TenancyCache({
      source: postgresLookups(database.sql),
      redis: loadConfig(env).redis!,
      keyPrefix: `tgw_refusals_${process.pid}:`,
      log,
      metrics,
    })
    t.teardown(() => cache.close())
    // Three failures of the commands connection, a backoff apart, beside the subscriber's own.
    const failures = async () => (await metrics.redisErrors.get()).values[0]?.value ?? 0
    t.ok(await until(20_000, async () => (await failures()) >= 3), 'the commands connection failed three times')
    t.same(
      lines,
      [`redis (${variable}) failed; using postgres until it answers again`],
      `one warning, naming ${variable}, for the outage of both connections`,
    )
    t.notOk(
      lines.some((line) => line.includes('REDIS_URL')),
      'none names REDIS_URL',
    )
    await cache.close()
  }
})
