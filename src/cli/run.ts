// The operator commands (docs/operations.md), run by `runCli`: from the process entry (src/cli.ts)
// or in process by the tests. Exactly one JSON object on stdout on success; on error, one line on
// stderr that starts with `error: `, and exit code 1. --help prints the usage on stdout. A run
// leaves nothing behind: it reads only the environment it is given and closes the pool and any
// Redis connection it opened before it returns.
import { parseArgs } from 'node:util'
import { loadConfig } from '../config.js'
import { resolveEncryptionKey } from '../encryption/key.js'
import { openStore } from '../store/db.js'
import { reachPostgres } from '../store/first-contact.js'
import { NotAnAccountError } from '../limits/store.js'
import { ExternalIdTakenError } from '../store/tenants.js'
import { ACCOUNT_COMMANDS } from './account-commands.js'
import { KEY_COMMANDS } from './key-commands.js'
import { importKeys } from './key-import-command.js'
import { type CliIo, type Command, UsageError, WROTE_OUTPUT } from './options.js'
import { USAGE_COMMANDS } from './usage-commands.js'
import { rotateSigningKeys } from './signing-key-commands.js'

export type { CliIo } from './options.js'

/** The variables a run reads, as `process.env` holds them. */
type Env = Readonly<Record<string, string | undefined>>

const USAGE = `usage: cli <command> [options]
  (from a clone: npm run cli -- <command> ...; in the image: node dist/cli.js <command> ...)

commands:
  migrate                      apply pending database migrations
  accounts create --name <name> [--external-id <id>] [--scopes <a,b>]
                               create a parent account and its first API key
  accounts limits --account <uuid> [--shadow] [--meter <name>] [--rate N/Ws] [--monthly-quota M [--quota-alerts 50,80,100]] [--clear]
                               set a parent account's limits (over it and all its sub-accounts);
                               --rate or --monthly-quota alone keeps the other, --clear removes both;
                               --quota-alerts: the shares of M (%) that write an alert (default 80,100);
                               --meter: the limits of a route meter, N and M in its units;
                               --shadow: the shadow limits (counted, never refusing), the enforced ones stay
  accounts scopes --account <uuid> (--allow <a,b,tracking:*> | --any)
                               the scopes (or patterns) the account may give its sub-accounts'
                               keys; --any lifts the ceiling (the default)
  accounts portal-origins --account <uuid> (--origins <https://a.example,…> | --none)
                               the https origins that may embed the account's sub-account portal
                               (its frame-ancestors); --none: no embedding (the default)
  accounts placement --account <uuid> (--cells <eu,us> [--default <eu>] | --none)
                               the cells the account may place its sub-accounts in, and the cell
                               of those it places nowhere (and of itself); --none: no cells
  accounts leak-policy --account <uuid> --policy revoke|alert
                               what a leaked key of the account comes to, when GitHub's secret
                               scanning or the account reports it: revoked at once (revoke, the
                               default) or an api_key.leaked event only (alert)
  keys create --account <uuid> --name <label> [--scopes <a,b>] [--expires-at <RFC 3339>]
                               mint another API key for a parent account (never expiring unless
                               --expires-at, at most 10 years ahead)
  keys revoke --account <uuid> --key <key_id>
                               revoke a key (replicas are told over Redis when REDIS_URL is set)
  keys roll --account <uuid> --key <key_id> [--expires-in-seconds S]
                               a new key like the old one; the old one keeps working for S
                               seconds (default 86400, at most 2592000; 0 revokes it at once)
  keys import --account <uuid> --file <keys.ndjson> [--dry-run]
                               import a parent account's own keys from elsewhere, a JSON object
                               a line (docs/key-imports.md); a result a line on stdout, then the
                               summary; --dry-run checks every line and writes nothing
  usage export [--from <RFC 3339>] [--to <RFC 3339>] [--account <uuid>] [--format ndjson|csv]
                               the closed usage periods' records of every parent account (or
                               one), from and to at period starts (default: this month so far);
                               records on stdout, a CloudEvent a line (ndjson) or a CSV row;
                               where the closed periods end on stderr
  usage reconcile [--from <RFC 3339>] [--to <RFC 3339>] [--account <uuid>]
                               per sub-account and meter: the usage meter beside what limits
                               charged, the request log's count and the export, each difference
                               explained (docs/billing.md); an entry a line on stdout (JSON)
  signing-keys rotate [--compromised]
                               publish a new signing key that signs 10 minutes from now;
                               --compromised: a new key signs at once and the old one is withdrawn
  help, --help, -h             print this usage

Each command but keys import, usage export and usage reconcile prints one JSON object on stdout. It reads DATABASE_URL (or DATA_DIR for the embedded
database), ENCRYPTION_KEY, REDIS_URL and GATEWAY_CONFIG from the environment, as the gateway does.
`

const COMMANDS: Record<string, Command> = {
  ...ACCOUNT_COMMANDS,
  ...KEY_COMMANDS,
  'keys import': importKeys,
  ...USAGE_COMMANDS,
  'signing-keys rotate': rotateSigningKeys,
}

/** Every command, in the order the usage lists them. */
export const CLI_COMMANDS: readonly string[] = Object.keys(COMMANDS)
const COMMAND_NAMES = CLI_COMMANDS.join(', ')

/** The usage was asked for: printed on stdout, exit 0. */
const HELP = Symbol('help')

async function run(argv: string[], env: Env, io: CliIo): Promise<unknown> {
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
      'quota-alerts': { type: 'string' },
      meter: { type: 'string' },
      shadow: { type: 'boolean' },
      clear: { type: 'boolean' },
      'expires-at': { type: 'string' },
      'expires-in-seconds': { type: 'string' },
      compromised: { type: 'boolean' },
      allow: { type: 'string' },
      any: { type: 'boolean' },
      origins: { type: 'string' },
      none: { type: 'boolean' },
      cells: { type: 'string' },
      default: { type: 'string' },
      from: { type: 'string' },
      to: { type: 'string' },
      format: { type: 'string' },
      file: { type: 'string' },
      'dry-run': { type: 'boolean' },
      policy: { type: 'string' },
    },
  })
  const { help, ...options } = values
  const commandName = positionals.join(' ')
  if (help === true || commandName === 'help') return HELP
  if (commandName === '') throw new UsageError(`a command is required: ${COMMAND_NAMES} (--help for the usage)`)
  const command = COMMANDS[commandName]
  if (command === undefined)
    throw new UsageError(`unknown command "${commandName}"; the commands are ${COMMAND_NAMES} (--help for the usage)`)
  const config = loadConfig(env)
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
    return await command(store.sql, options, { ...config, encryptionKey }, io)
  } finally {
    await store.close()
  }
}

/** The one line an error prints, after `error: `. */
function errorLine(err: unknown): string {
  if (err instanceof ExternalIdTakenError) return 'a parent account with this external id already exists'
  if (err instanceof NotAnAccountError)
    return err.subAccount
      ? `${err.id} is a sub-account: its limits are its parent's to set (PATCH /v1/sub-accounts/${err.id})`
      : `no parent account ${err.id}`
  return (err as Error).message.split('\n')[0]!
}

/**
 * Runs one command line (`argv` without the program's name) against the variables in `env`,
 * writing its output to `io`; resolves to the exit code. Never exits the process and never reads
 * `process.env`.
 */
export async function runCli(argv: string[], env: Env, io: CliIo): Promise<number> {
  let result: unknown
  try {
    result = await run(argv, env, io)
  } catch (err) {
    io.stderr(`error: ${errorLine(err)}\n`)
    return 1
  }
  if (result !== WROTE_OUTPUT) io.stdout(result === HELP ? USAGE : `${JSON.stringify(result)}\n`)
  return 0
}
