// What the operator commands share (docs/configuration.md): their usage errors, the readers of
// their flags, the parent account they name, and telling the replicas of a change over Redis.
import { SCOPE_PATTERN } from '../shared/scopes.js'
import { publishInvalidation } from '../cache/index.js'
import { describeRedisTarget, type RedisTarget, variableOf } from '../cache/redis-topology.js'
import type { Config } from '../config.js'
import type { Sql } from '../store/db.js'
import { getTenant } from '../store/tenants.js'
import { isUuid } from '../shared/identifiers.js'

/** A mistake in the command line or its values: one line on stderr, exit 1, nothing changed. */
export class UsageError extends Error {}

export type Options = Record<string, string | boolean | undefined>

/** What a command returns when it wrote its own output (records, not one JSON object). */
export const WROTE_OUTPUT = Symbol('wrote output')

/** Where a run writes: the process's stdout and stderr from the entry, strings kept by a test. */
export interface CliIo {
  stdout(text: string): void
  stderr(text: string): void
}

export type Command = (sql: Sql, options: Options, config: Config, io: CliIo) => Promise<unknown>

export function required(options: Options, name: string): string {
  const value = options[name]
  if (typeof value !== 'string' || value.trim() === '') throw new UsageError(`--${name} is required`)
  return value.trim()
}

export function name(options: Options, flag = 'name'): string {
  const value = required(options, flag)
  if ([...value].length > 200) throw new UsageError(`--${flag} must hold 1 to 200 characters`)
  return value
}

export function uuid(options: Options, flag: string): string {
  const value = required(options, flag)
  if (!isUuid(value)) throw new UsageError(`--${flag} must be a UUID`)
  return value.toLowerCase()
}

export function scopes(options: Options, flag = '--scopes'): string[] | undefined {
  if (typeof options.scopes !== 'string') return undefined
  const list = options.scopes
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '')
  const pattern = new RegExp(SCOPE_PATTERN)
  const bad = list.find((s) => !pattern.test(s) || s.length > 100)
  if (bad !== undefined) throw new UsageError(`${flag}: "${bad}" is not a scope name`)
  if (list.length === 0 || list.length > 50) throw new UsageError(`${flag} must name 1 to 50 scopes`)
  return list
}

export async function parentAccount(sql: Sql, id: string) {
  const account = await getTenant(sql, id)
  if (account === null || account.parent_id !== null) throw new UsageError(`no parent account ${id}`)
  return account
}

/** Publishes cache invalidations, repeated after 1 s; a Redis failure is a warning, the change stands. */
export async function tellReplicas(
  redis: RedisTarget,
  prefix: string,
  names: string[],
  done: string,
  io: CliIo,
): Promise<void> {
  try {
    await publishInvalidation(redis, prefix, names, { repeatAfterMs: 1_000 })
  } catch (err) {
    io.stderr(
      `warning: ${done}, but Redis (${variableOf(redis)}, ${describeRedisTarget(redis, { short: true })}) could not tell the replicas at once (${(err as Error).message}); they follow within a minute (the cache TTL)\n`,
    )
  }
}
