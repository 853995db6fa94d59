// `cli -- signing-keys rotate [--compromised]` (docs/credentials.md, Signing keys): a next key now
// (it signs after the lead), or with --compromised a fresh key that signs at once while the old
// one is withdrawn. Either way every replica is told over Redis, and finds out on its own within
// its reload interval if the message is lost.
import { cacheKeys, publishInvalidation } from '../cache/index.js'
import { describeRedisTarget, type RedisTarget, variableOf } from '../cache/redis-topology.js'
import type { Config } from '../config.js'
import { SigningKeyStore } from '../signing-keys/store.js'
import type { Sql } from '../store/db.js'
import { migrate } from '../store/migrate.js'
import type { CliIo } from './options.js'

export type CommandOptions = Readonly<Record<string, string | boolean | undefined>>

export async function rotateSigningKeys(
  sql: Sql,
  options: CommandOptions,
  config: Config,
  io: CliIo,
): Promise<unknown> {
  // cli/run.ts resolves it for every command; a caller that did not is a bug.
  if (config.encryptionKey === undefined) throw new Error('ENCRYPTION_KEY is required')
  await migrate(sql)
  const store = new SigningKeyStore({ sql, encryptionKey: config.encryptionKey })
  const compromised = options.compromised === true
  const result = compromised ? await store.rotateCompromised() : { signing_key: await store.rotate() }
  if (config.redis !== undefined) await tellReplicas(config.redis, config.redisKeyPrefix, compromised, io)
  return result
}

/** Over the invalidation bus, repeated after 1 s; a Redis failure is a warning, the change stands. */
async function tellReplicas(redis: RedisTarget, prefix: string, compromised: boolean, io: CliIo): Promise<void> {
  try {
    await publishInvalidation(redis, prefix, [cacheKeys.signingKeys], { repeatAfterMs: 1_000 })
  } catch (err) {
    const what = compromised ? 'the old key is withdrawn' : 'the new key is published'
    io.stderr(
      `warning: ${what}, but Redis (${variableOf(redis)}, ${describeRedisTarget(redis, { short: true })}) could not tell the replicas at once (${(err as Error).message}); they follow within a minute\n`,
    )
  }
}
