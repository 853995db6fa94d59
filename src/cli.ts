// Operator commands (docs/operations.md). Exactly one JSON object on stdout on success; on error,
// one line on stderr that starts with `error: `, and a non-zero exit. --help prints the usage on
// stdout.
import { parseArgs } from 'node:util'
import { createParentWithKey, mintKey } from './auth/mint.js'
import { MANAGEMENT_SCOPES, SCOPE_PATTERN } from './auth/scopes.js'
import { cacheKeys, keyEntries, publishInvalidation } from './cache/index.js'
import { loadConfig, type Config } from './config.js'
import { presentKey } from './management/present.js'
import { openStore, reachPostgres, type Sql } from './store/db.js'
import { revokeKey } from './store/keys.js'
import { migrate } from './store/migrate.js'
import { NotAnAccountError, setAccountLimits, type LimitsChange } from './store/limits.js'
import { ExternalIdTakenError, getTenant, type TenantRow } from './store/tenants.js'
import { isExternalId, isUuid } from './tenancy/identifiers.js'
import { parseMonthlyQuota, parseRate, shownLimits } from './tenancy/limits.js'

const USAGE = `usage: cli <command> [options]
  (from a clone: npm run cli -- <command> ...; in the image: node dist/cli.js <command> ...)

commands:
  migrate                      apply pending database migrations
  accounts create --name <name> [--external-id <id>] [--scopes <a,b>]
                               create a parent account and its first API key
  accounts limits --account <uuid> [--rate N/Ws] [--monthly-quota M] [--clear]
                               set a parent account's limits (over it and all its sub-accounts);
                               --rate or --monthly-quota alone keeps the other, --clear removes both
  keys create --account <uuid> --name <label> [--scopes <a,b>]
                               mint another API key for a parent account
  keys revoke --account <uuid> --key <key_id>
                               revoke a key (replicas are told over Redis when REDIS_URL is set)
  help, --help, -h             print this usage

Each command prints one JSON object on stdout. It reads DATABASE_URL (or DATA_DIR for the embedded
database), REDIS_URL and GATEWAY_CONFIG from the environment, as the gateway does.
`

const COMMAND_NAMES = 'migrate, accounts create, accounts limits, keys create, keys revoke'

class UsageError extends Error {}

type Options = Record<string, string | boolean | undefined>

function required(options: Options, name: string): string {
  const value = options[name]
  if (typeof value !== 'string' || value.trim() === '') throw new UsageError(`--${name} is required`)
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
  if (typeof options.scopes !== 'string') return undefined
  const list = options.scopes
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '')
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

/** A parent account as the CLI prints it. */
const presentAccount = (account: TenantRow) => ({
  id: account.id,
  name: account.name,
  external_id: account.external_id,
  created_at: account.created_at.toISOString(),
})

/** What `accounts limits` changes: each flag given replaces its limit, the others stay; --clear removes both. */
function limitsChange(options: Options): LimitsChange {
  const { rate, clear } = options
  const quota = options['monthly-quota']
  if (clear === true) {
    if (rate !== undefined || quota !== undefined)
      throw new UsageError('--clear removes both limits: give it without --rate and --monthly-quota')
    return { rate: null, monthly_quota: null }
  }
  if (rate === undefined && quota === undefined)
    throw new UsageError('give --rate N/Ws, --monthly-quota M, or --clear (--help for the usage)')
  return {
    ...(typeof rate === 'string' ? { rate: parseRate(rate) } : {}),
    ...(typeof quota === 'string' ? { monthly_quota: parseMonthlyQuota(quota) } : {}),
  }
}

type Command = (sql: Sql, options: Options, config: Config) => Promise<unknown>

const COMMANDS: Record<string, Command> = {
  migrate: async (sql) => ({ applied: await migrate(sql) }),

  'accounts create': async (sql, options) => {
    const externalId = options['external-id'] as string | undefined
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
      account: presentAccount(account),
      api_key: key.apiKey,
      key: presentKey(key.row),
    }
  },

  'accounts limits': async (sql, options, config) => {
    const accountId = uuid(options, 'account')
    const change = limitsChange(options)
    await migrate(sql)
    const account = await setAccountLimits(sql, accountId, change)
    // The proxy reads an account's limits from its cached tenant record: tell the replicas now.
    if (config.redisUrl !== undefined)
      await tellReplicas(config.redisUrl, config.redisKeyPrefix, [cacheKeys.tenant(accountId)], 'the limits are stored')
    return { account: { ...presentAccount(account), limits: shownLimits(account.limits) } }
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
    if (config.redisUrl !== undefined)
      await tellReplicas(
        config.redisUrl,
        config.redisKeyPrefix,
        keyEntries({ id: row.id, keyDigest: row.key_digest }),
        'the key is revoked',
      )
    return { key: presentKey(row) }
  },
}

/** Publishes cache invalidations, repeated after 1 s; a Redis failure is a warning, the change stands. */
async function tellReplicas(redisUrl: string, prefix: string, names: string[], done: string): Promise<void> {
  try {
    await publishInvalidation(redisUrl, prefix, names, { repeatAfterMs: 1_000 })
  } catch (err) {
    process.stderr.write(
      `warning: ${done}, but Redis (REDIS_URL, ${describeRedisUrl(redisUrl)}) could not tell the replicas at once (${(err as Error).message}); they follow within a minute (the cache TTL)\n`,
    )
  }
}

/** Where a Redis URL points, for messages: host:port, never the password. */
function describeRedisUrl(redisUrl: string): string {
  const url = new URL(redisUrl)
  return `${url.hostname || 'localhost'}:${url.port || '6379'}`
}

/** The usage was asked for: printed on stdout, exit 0. */
const HELP = Symbol('help')

async function run(argv: string[]): Promise<unknown> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      help: { type: 'boolean', short: 'h' },
      name: { type: 'string' },
      'external-id': { type: 'string' },
      scopes: { type: 'string' },
      account: { type: 'string' },
      key: { type: 'string' },
      rate: { type: 'string' },
      'monthly-quota': { type: 'string' },
      clear: { type: 'boolean' },
    },
  })
  const { help, ...options } = values
  const commandName = positionals.join(' ')
  if (help === true || commandName === 'help') return HELP
  if (commandName === '') throw new UsageError(`a command is required: ${COMMAND_NAMES} (--help for the usage)`)
  const command = COMMANDS[commandName]
  if (command === undefined)
    throw new UsageError(`unknown command "${commandName}"; the commands are ${COMMAND_NAMES} (--help for the usage)`)
  const config = loadConfig(process.env)
  const store = await openStore({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    holder: 'the cli',
    maxConnections: 2,
  })
  try {
    if (config.databaseUrl !== undefined) await reachPostgres(store.sql, config.databaseUrl)
    return await command(store.sql, options, config)
  } finally {
    await store.close()
  }
}

run(process.argv.slice(2)).then(
  (result) => {
    process.stdout.write(result === HELP ? USAGE : `${JSON.stringify(result)}\n`)
  },
  (err: unknown) => {
    let message: string
    if (err instanceof ExternalIdTakenError) message = 'a parent account with this external id already exists'
    else if (err instanceof NotAnAccountError)
      message = err.subAccount
        ? `${err.id} is a sub-account: its limits are its parent's to set (PATCH /v1/sub-accounts/${err.id})`
        : `no parent account ${err.id}`
    else message = (err as Error).message.split('\n')[0]!
    process.stderr.write(`error: ${message}\n`)
    process.exitCode = 1
  },
)
