// Operator commands (docs/operations.md). Exactly one JSON object on stdout on success; on error,
// one line on stderr that starts with `error: `, and a non-zero exit. --help prints the usage on
// stdout.
import { parseArgs } from 'node:util'
import { recordFirstKey } from './auth/key-changes.js'
import { createParentWithKey } from './auth/mint.js'
import { cacheKeys } from './cache/index.js'
import { KEY_COMMANDS } from './cli/key-commands.js'
import { type Command, name, type Options, scopes, tellReplicas, UsageError, uuid } from './cli/options.js'
import { rotateSigningKeys } from './cli/signing-key-commands.js'
import { loadConfig } from './config.js'
import { resolveEncryptionKey } from './credentials/encryption-key.js'
import { operatorOrigin } from './events/record.js'
import { presentKey } from './management/present.js'
import { openStore, reachPostgres } from './store/db.js'
import { migrate } from './store/migrate.js'
import { inTransaction } from './store/transaction.js'
import { NotAnAccountError, setAccountLimits, type LimitsChange } from './store/limits.js'
import { ExternalIdTakenError, type TenantRow } from './store/tenants.js'
import { isExternalId } from './tenancy/identifiers.js'
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
  keys create --account <uuid> --name <label> [--scopes <a,b>] [--expires-at <RFC 3339>]
                               mint another API key for a parent account (never expiring unless
                               --expires-at, at most 10 years ahead)
  keys revoke --account <uuid> --key <key_id>
                               revoke a key (replicas are told over Redis when REDIS_URL is set)
  keys roll --account <uuid> --key <key_id> [--expires-in-seconds S]
                               a new key like the old one; the old one keeps working for S
                               seconds (default 86400, at most 2592000; 0 revokes it at once)
  signing-keys rotate [--compromised]
                               publish a new signing key that signs 10 minutes from now;
                               --compromised: a new key signs at once and the old one is withdrawn
  help, --help, -h             print this usage

Each command prints one JSON object on stdout. It reads DATABASE_URL (or DATA_DIR for the embedded
database), ENCRYPTION_KEY, REDIS_URL and GATEWAY_CONFIG from the environment, as the gateway does.
`

const COMMAND_NAMES =
  'migrate, accounts create, accounts limits, keys create, keys revoke, keys roll, signing-keys rotate'

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
    // The account's first key is its first event (docs/events.md: an account's creation has no type of its own).
    const { account, key } = await inTransaction(sql, async (tx) => {
      const created = await createParentWithKey(tx, { name: accountName, externalId: externalId ?? null, extraScopes })
      await recordFirstKey(tx, operatorOrigin(), created)
      return created
    })
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
    const account = await setAccountLimits(sql, accountId, change, operatorOrigin())
    // The proxy reads an account's limits from its cached tenant record: tell the replicas now.
    if (config.redisUrl !== undefined)
      await tellReplicas(config.redisUrl, config.redisKeyPrefix, [cacheKeys.tenant(accountId)], 'the limits are stored')
    return { account: { ...presentAccount(account), limits: shownLimits(account.limits) } }
  },

  ...KEY_COMMANDS,
  'signing-keys rotate': rotateSigningKeys,
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
      'expires-at': { type: 'string' },
      'expires-in-seconds': { type: 'string' },
      compromised: { type: 'boolean' },
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
    // Every command, as the gateway: with DATABASE_URL, not a step without the key (one line naming it).
    const encryptionKey = resolveEncryptionKey(config)
    if (config.databaseUrl !== undefined) await reachPostgres(store.sql, config.databaseUrl)
    return await command(store.sql, options, { ...config, encryptionKey })
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
