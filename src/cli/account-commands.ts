// The operator's commands on the database and on parent accounts (docs/configuration.md): migrate,
// create a parent account with its first key, set its limits. Every value is checked before the
// store is touched, so a bad one changes nothing.
import { isManagementScope } from '../shared/scopes.js'
import { recordFirstKey } from '../auth/key-changes.js'
import { createParentWithKey } from '../auth/mint.js'
import { cacheKeys } from '../cache/index.js'
import { operatorOrigin } from '../events/record.js'
import { presentKey } from '../schemas/present.js'
import { type LimitsChange, setAccountLimits } from '../limits/store.js'
import { migrate } from '../store/migrate.js'
import { changeAccountList } from '../events/account-list-changes.js'
import { changeAccountSettings } from '../events/account-settings.js'
import { httpsOrigin, PORTAL_ORIGINS_MAX } from '../portal/origin-changes.js'
import type { AccountCells, TenantRow } from '../store/tenants.js'
import { changeAccountCells } from '../events/account-placement-changes.js'
import { CELL_NAME } from '../proxy/upstreams/route-cells.js'
import { inTransaction } from '../store/transaction.js'
import { isExternalId } from '../shared/identifiers.js'
import {
  parseAlertThresholds,
  parseMeterName,
  parseMeterQuota,
  parseMeterRate,
  parseMonthlyQuota,
  parseRate,
  shownLimits,
} from '../shared/tenant-limits.js'
import { type Command, name, type Options, scopes, tellReplicas, UsageError, uuid } from './options.js'

/** A parent account as the CLI prints it. */
const presentAccount = (account: TenantRow) => ({
  id: account.id,
  name: account.name,
  external_id: account.external_id,
  created_at: account.created_at.toISOString(),
})

/**
 * What `accounts limits` changes: each flag given replaces its limit, the others stay; --clear
 * removes both. With `--meter NAME`, the limits of that route meter, in its units.
 */
function limitsChange(options: Options): LimitsChange {
  const { rate, clear } = options
  const quota = options['monthly-quota']
  const alerts = options['quota-alerts']
  const meter = typeof options.meter === 'string' ? parseMeterName(options.meter) : undefined
  const shadow = options.shadow === true ? { shadow: true } : {}
  if (alerts !== undefined && quota === undefined)
    throw new UsageError('--quota-alerts goes with --monthly-quota M: give the quota they are shares of')
  if (clear === true) {
    if (rate !== undefined || quota !== undefined)
      throw new UsageError('--clear removes both limits: give it without --rate and --monthly-quota')
    return { meter, rate: null, monthly_quota: null, ...shadow } as LimitsChange
  }
  if (rate === undefined && quota === undefined)
    throw new UsageError('give --rate N/Ws, --monthly-quota M, or --clear (--help for the usage)')
  const thresholds = typeof alerts === 'string' ? { alert_thresholds: parseAlertThresholds(alerts) } : {}
  if (meter !== undefined)
    return {
      meter,
      ...shadow,
      ...(typeof rate === 'string' ? { rate: parseMeterRate(rate) } : {}),
      ...(typeof quota === 'string' ? { monthly_quota: { ...parseMeterQuota(quota), ...thresholds } } : {}),
    }
  return {
    ...shadow,
    ...(typeof rate === 'string' ? { rate: parseRate(rate) } : {}),
    ...(typeof quota === 'string'
      ? {
          monthly_quota: {
            ...parseMonthlyQuota(quota),
            ...(typeof alerts === 'string' ? { alert_thresholds: parseAlertThresholds(alerts) } : {}),
          },
        }
      : {}),
  }
}

export const ACCOUNT_COMMANDS: Record<string, Command> = {
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

  'accounts limits': async (sql, options, config, io) => {
    const accountId = uuid(options, 'account')
    const change = limitsChange(options)
    await migrate(sql)
    const account = await setAccountLimits(sql, accountId, change, operatorOrigin())
    // The proxy reads an account's limits from its cached tenant record: tell the replicas now.
    if (config.redis !== undefined)
      await tellReplicas(
        config.redis,
        config.redisKeyPrefix,
        [cacheKeys.tenant(accountId)],
        'the limits are stored',
        io,
      )
    return { account: { ...presentAccount(account), limits: shownLimits(account.limits) } }
  },

  // The ceiling is read when a key is minted or rolled, from Postgres: no cache to tell. Its
  // change is an event of the account (account.scopes_updated), written with it.
  'accounts scopes': async (sql, options) => {
    const accountId = uuid(options, 'account')
    const allowed = scopeCeilingOption(options)
    await migrate(sql)
    const changed = await changeAccountList(sql, accountId, 'allowed_scopes', allowed, operatorOrigin())
    if (changed === null) throw new UsageError(`no parent account ${accountId}`)
    return { account: { ...presentAccount(changed.account), allowed_scopes: changed.list } }
  },

  // A parent's default cell is in its cached tenant record (the proxy places its sub-accounts with
  // it): the replicas are told, and their sockets on a cell it left close (docs/api.md, Cells). Its
  // change is an event of the account (account.placement_updated), written with it.
  'accounts placement': async (sql, options, config, io) => {
    const accountId = uuid(options, 'account')
    const cells = placementOption(options)
    await migrate(sql)
    const changed = await changeAccountCells(sql, accountId, cells, operatorOrigin())
    if (changed === null) throw new UsageError(`no parent account ${accountId}`)
    if (changed.changed && config.redis !== undefined)
      await tellReplicas(
        config.redis,
        config.redisKeyPrefix,
        [cacheKeys.tenant(accountId)],
        'the placement is stored',
        io,
      )
    return { account: { ...presentAccount(changed.account), cells: cells.allowed, default_cell: cells.default } }
  },

  // Read from Postgres at each exchange of a portal link: no cache to tell.
  'accounts portal-origins': async (sql, options) => {
    const accountId = uuid(options, 'account')
    const origins = portalOriginsOption(options)
    await migrate(sql)
    const changed = await changeAccountList(sql, accountId, 'portal_origins', origins, operatorOrigin())
    if (changed === null) throw new UsageError(`no parent account ${accountId}`)
    return { account: { ...presentAccount(changed.account), portal_origins: changed.list } }
  },

  // Read from Postgres when a leak is reported: no cache to tell.
  'accounts leak-policy': async (sql, options) => {
    const accountId = uuid(options, 'account')
    const policy = options.policy
    if (policy !== 'revoke' && policy !== 'alert')
      throw new UsageError('--policy must be revoke (a leaked key is revoked at once) or alert (an event only)')
    await migrate(sql)
    const changed = await changeAccountSettings(sql, accountId, { leak_policy: policy }, operatorOrigin())
    if (changed === null) throw new UsageError(`no parent account ${accountId}`)
    return { account: { ...presentAccount(changed.account), leak_policy: changed.settings.leak_policy } }
  },
}

/** `--cells eu,us [--default eu]`, or `--none` (no cells, no default): exactly one. */
function placementOption(options: Options): AccountCells {
  if (options.none === true) {
    if (options.cells !== undefined || options.default !== undefined)
      throw new UsageError('give --cells <eu,us> [--default eu] or --none, not both')
    return { allowed: null, default: null }
  }
  if (typeof options.cells !== 'string')
    throw new UsageError('give --cells <eu,us> [--default eu] or --none (--help for the usage)')
  const allowed = [...new Set(options.cells.split(',').map((cell) => cell.trim()))]
  const bad = allowed.find((cell) => !CELL_NAME.test(cell))
  if (bad !== undefined)
    throw new UsageError(
      `--cells: ${JSON.stringify(bad.slice(0, 40))} is not a cell name: 1 to 32 of a-z, 0-9 and -, starting with a letter`,
    )
  const fallback = options.default
  if (fallback !== undefined && (typeof fallback !== 'string' || !allowed.includes(fallback)))
    throw new UsageError(`--default must be one of --cells (${allowed.join(', ')})`)
  return { allowed, default: fallback ?? null }
}

/** `--origins https://a.example,https://b.example`, or `--none` (null): exactly one. */
function portalOriginsOption(options: Options): string[] | null {
  if (options.none === true) {
    if (options.origins !== undefined) throw new UsageError('give --origins <https://a.example,…> or --none, not both')
    return null
  }
  if (typeof options.origins !== 'string')
    throw new UsageError('give --origins <https://a.example,https://b.example> or --none (--help for the usage)')
  const given = options.origins
    .split(',')
    .map((o) => o.trim())
    .filter((o) => o !== '')
  if (given.length === 0 || given.length > PORTAL_ORIGINS_MAX)
    throw new UsageError(`--origins must name 1 to ${PORTAL_ORIGINS_MAX} origins`)
  const origins = given.map((text) => {
    const origin = httpsOrigin(text)
    if (origin === null)
      throw new UsageError(
        `--origins: ${JSON.stringify(text)} is not an https origin: give https://host or https://host:port, the host in letters, digits, hyphens and dots, with no path and no other character`,
      )
    return origin
  })
  return [...new Set(origins)]
}

/** `--allow a,b` (scopes or patterns), or `--any` (null): exactly one. */
function scopeCeilingOption(options: Options): string[] | null {
  if (options.any === true) {
    if (options.allow !== undefined) throw new UsageError('give --allow <a,b> or --any, not both')
    return null
  }
  if (typeof options.allow !== 'string')
    throw new UsageError('give --allow <a,b,tracking:*> or --any (--help for the usage)')
  const allowed = [...new Set(scopes({ scopes: options.allow }, '--allow')!)]
  const reserved = allowed.find(isManagementScope)
  if (reserved !== undefined)
    throw new UsageError(`--allow: "${reserved}" is a parent key's own scope, which no sub-account key can hold`)
  return allowed
}
