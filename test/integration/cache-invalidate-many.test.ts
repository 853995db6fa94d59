// An invalidation of many names on one Redis server (cache/invalidation-messages.ts): a script
// for each 500 names, not a MULTI a name, with the same effect on each name (its generation
// bumped with a TTL, its entry, stamp and legacy names deleted) and one message. On a Redis of the
// test's own, so that its command counts are this test's alone.
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import t from 'tap'
import { cacheKeys } from '../../src/cache/index.js'
import {
  entryKey,
  generationKey,
  invalidationChannel,
  legacyEntryKey,
  legacyGenerationKey,
  stampKey,
} from '../../src/cache/entry-names.js'
import { INVALIDATE_MANY_NAMES, sendInvalidation } from '../../src/cache/invalidation-messages.js'
import { startRedis } from '../helpers/own-redis.js'

const own = await startRedis(t)
const redis = new Redis(own.url)
const listener = new Redis(own.url)
t.teardown(() => {
  redis.disconnect()
  listener.disconnect()
})

/** How many times Redis ran each command since the last CONFIG RESETSTAT. */
async function calls(): Promise<Record<string, number>> {
  const info = (await redis.info('commandstats')) as string
  const counts: Record<string, number> = {}
  for (const [, name, n] of info.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) counts[name!] = Number(n)
  return counts
}

t.test('1,200 names: three scripts, no MULTI, each name invalidated, one message', async (t) => {
  const prefix = 'many:'
  const names = Array.from({ length: 1_200 }, () => cacheKeys.key(randomBytes(32)))
  // Each name held in Redis, under both versions' names, with a generation already.
  const held = names.flatMap((name) => [entryKey(prefix, name), stampKey(prefix, name), legacyEntryKey(prefix, name)])
  await redis.mset(...held.flatMap((key) => [key, 'x']))
  await redis.mset(
    ...names.flatMap((name) => [generationKey(prefix, name), '7', legacyGenerationKey(prefix, name), '2']),
  )
  const messages: string[] = []
  listener.on('message', (_channel: string, message: string) => messages.push(message))
  await listener.subscribe(invalidationChannel(prefix))
  await redis.config('RESETSTAT')

  await sendInvalidation(redis, prefix, names)

  const counts = await calls()
  t.equal(counts.eval, Math.ceil(names.length / INVALIDATE_MANY_NAMES), 'a script for each 500 names')
  t.equal(counts.multi ?? 0, 0, 'no MULTI')
  t.equal(counts.exec ?? 0, 0, 'no EXEC')
  t.equal(counts.incr, names.length * 2, 'each generation bumped, both versions')
  t.equal(await redis.exists(...held), 0, 'every entry, stamp and legacy entry deleted')
  const generations = await redis.mget(
    ...names.flatMap((name) => [generationKey(prefix, name), legacyGenerationKey(prefix, name)]),
  )
  t.ok(
    generations.every((g, i) => g === (i % 2 === 0 ? '8' : '3')),
    'each generation one more',
  )
  const ttl = await redis.pttl(generationKey(prefix, names.at(-1)!))
  t.ok(ttl > 0, 'a generation expires')
  await new Promise<void>((resolve) => {
    if (messages.length > 0) resolve()
    else listener.once('message', () => resolve())
  })
  t.same(JSON.parse(messages[0]!), names, 'one message with every name')
})
