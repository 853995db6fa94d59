// Operator commands (docs/configuration.md). Exactly one JSON object on stdout on success; one line on
// stderr and a non-zero exit on error.
import { parseArgs } from 'node:util'
import { createParentWithKey, mintKey } from './auth/mint.js'
import { MANAGEMENT_SCOPES, SCOPE_PATTERN } from './auth/scopes.js'
import { publishInvalidation, cacheKeys } from './cache/index.js'
import { ConfigError, loadConfig, type Config } from './config.js'
import { presentKey } from './management/present.js'
import { openStore, type Sql } from './store/db.js'
import { revokeKey } from './store/keys.js'
import { migrate } from './store/migrate.js'
import { ExternalIdTakenError, getTenant } from './store/tenants.js'
import { isExternalId, isUuid } from './tenancy/identifiers.js'

const USAGE = `usage:
  cli migrate
  cli accounts create --name <name> [--external-id <id>] [--scopes <a,b>]
  cli keys create --account <uuid> --name <label> [--scopes <a,b>]
  cli keys revoke --account <uuid> --key <key_id>`

class UsageError extends Error {}

type Options = Record<string, string | undefined>

function required(options: Options, name: string): string {
  const value = options[name]
  if (value === undefined || value.trim() === '') throw new UsageError(`--${name} is required`)
  return value.trim()
}

function name(options: Options, flag = 'name'): string {
  const value = required(options, flag)
  if ([...value].length > 200) throw new UsageError(`--${flag} must hold 1 to 200 characters`)
  return value
}

function uuid(options: Options, flag: string): string {
  const value = required(options, flag)
  if (!isUuid(value)) throw new UsageError(`--${flag} must be a UUID`)
  return value.toLowerCase()
}

function scopes(options: Options): string[] | undefined {
  if (options.scopes === undefined) return undefined
  const list = options.scopes.split(',').map((s) => s.trim()).filter((s) => s !== '')
  const pattern = new RegExp(SCOPE_PATTERN)
  const bad = list.find((s) => !pattern.test(s) || s.length > 100)
  if (bad !== undefined) throw new UsageError(`--scopes: "${bad}" is not a scope name`)
  if (list.length === 0 || list.length > 50) throw new UsageError('--scopes must name 1 to 50 scopes')
  return list
}

async function parentAccount(sql: Sql, id: string) {
  const account = await getTenant(sql, id)
  if (account === null || account.parent_id !== null) throw new UsageError(`no parent account ${id}`)
  return account
}

type Command = (sql: Sql, options: Options, config: Config) => Promise<unknown>

const COMMANDS: Record<string, Command> = {
  migrate: async (sql) => ({ applied: await migrate(sql) }),

  'accounts create': async (sql, options) => {
    const externalId = options['external-id']
    if (externalId !== undefined && !isExternalId(externalId)) {
      throw new UsageError('--external-id must be 1-128 of A-Z a-z 0-9 . _ - : @ / +')
    }
    const accountName = name(options)
    const extraScopes = scopes(options) ?? []
    await migrate(sql)
    const { account, key } = await sql.begin((tx) =>
      createParentWithKey(tx, { name: accountName, externalId: externalId ?? null, extraScopes }),
    )
    return {
      account: { id: account.id, name: account.name, external_id: account.external_id, created_at: account.created_at.toISOString() },
      api_key: key.apiKey,
      key: presentKey(key.row),
    }
  },

  'keys create': async (sql, options) => {
    const accountId = uuid(options, 'account')
    const label = name(options)
    const keyScopes = scopes(options) ?? [...MANAGEMENT_SCOPES]
    await migrate(sql)
    await parentAccount(sql, accountId)
    const key = await mintKey(sql, { tenantId: accountId, name: label, scopes: keyScopes, withClientSecret: false })
    return { key: presentKey(key.row), api_key: key.apiKey }
  },

  'keys revoke': async (sql, options, config) => {
    const accountId = uuid(options, 'account')
    const keyId = uuid(options, 'key')
    await migrate(sql)
    await parentAccount(sql, accountId)
    const row = await revokeKey(sql, accountId, keyId)
    if (row === null) throw new UsageError(`account ${accountId} has no key ${keyId}`)
    // Replicas cache keys: tell them now, or they notice within their in-process TTL (docs/architecture.md, caches).
    if (config.redisUrl !== undefined) {
      try {
        await publishInvalidation(config.redisUrl, config.redisKeyPrefix, [cacheKeys.key(row.key_digest)], { repeatAfterMs: 1_000 })
      } catch (err) {
        process.stderr.write(`warning: the key is revoked, but replicas could not be told at once (${(err as Error).message}); they refuse it within a minute (the cache TTL)\n`)
      }
    }
    return { key: presentKey(row) }
  },
}

async function run(argv: string[]): Promise<unknown> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      name: { type: 'string' },
      'external-id': { type: 'string' },
      scopes: { type: 'string' },
      account: { type: 'string' },
      key: { type: 'string' },
    },
  })
  const command = COMMANDS[positionals.join(' ')]
  if (command === undefined) throw new UsageError(USAGE.replaceAll('\n', ' '))
  const config = loadConfig(process.env)
  const store = await openStore({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, holder: 'the cli', maxConnections: 2 })
  try {
    return await command(store.sql, values, config)
  } finally {
    await store.close()
  }
}

run(process.argv.slice(2)).then(
  (result) => {
    process.stdout.write(`${JSON.stringify(result)}\n`)
  },
  (err: unknown) => {
    let message: string
    if (err instanceof UsageError || err instanceof ConfigError) message = err.message
    else if (err instanceof ExternalIdTakenError) message = 'a parent account with this external id already exists'
    else message = `error: ${(err as Error).message}`
    process.stderr.write(`${message.split('\n')[0]}\n`)
    process.exitCode = 1
  },
)
