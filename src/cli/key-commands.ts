// The operator's commands on parent keys (docs/configuration.md; docs/credentials.md, key
// lifecycle): create (optionally expiring), revoke, roll. Every value is checked before the store
// is touched, so a bad one changes nothing.
import { MAX_ROLL_OVERLAP_SECONDS, DEFAULT_ROLL_OVERLAP_SECONDS, parseExpiresAt } from '../shared/key-expiry.js'
import { mintKeyWithEvent, revokeKeyWithEvent } from '../auth/key-changes.js'
import { rollKey } from '../auth/roll.js'
import { MANAGEMENT_SCOPES } from '../shared/scopes.js'
import { keyEntries } from '../cache/index.js'
import { presentKey } from '../schemas/present.js'
import { operatorOrigin } from '../events/record.js'
import { migrate } from '../store/migrate.js'
import { type Command, name, type Options, parentAccount, scopes, tellReplicas, UsageError, uuid } from './options.js'

function expiresAt(options: Options): Date | null {
  const value = options['expires-at']
  if (value === undefined) return null
  const parsed = parseExpiresAt(String(value).trim())
  if ('error' in parsed) throw new UsageError(`--expires-at ${parsed.error}`)
  return parsed.at
}

function overlapSeconds(options: Options): number {
  const value = options['expires-in-seconds']
  if (value === undefined) return DEFAULT_ROLL_OVERLAP_SECONDS
  const text = String(value).trim()
  const seconds = /^\d{1,10}$/.test(text) ? Number(text) : Number.NaN
  if (!(seconds <= MAX_ROLL_OVERLAP_SECONDS))
    throw new UsageError(`--expires-in-seconds must be a whole number of seconds from 0 to ${MAX_ROLL_OVERLAP_SECONDS}`)
  return seconds
}

export const KEY_COMMANDS: Record<string, Command> = {
  'keys create': async (sql, options) => {
    const accountId = uuid(options, 'account')
    const label = name(options)
    const keyScopes = scopes(options) ?? [...MANAGEMENT_SCOPES]
    const expiry = expiresAt(options)
    await migrate(sql)
    await parentAccount(sql, accountId)
    const key = await mintKeyWithEvent(sql, operatorOrigin(), accountId, {
      tenantId: accountId,
      name: label,
      scopes: keyScopes,
      withClientSecret: false,
      expiresAt: expiry,
    })
    return { key: presentKey(key.row), api_key: key.apiKey }
  },

  'keys revoke': async (sql, options, config, io) => {
    const accountId = uuid(options, 'account')
    const keyId = uuid(options, 'key')
    await migrate(sql)
    await parentAccount(sql, accountId)
    const row = await revokeKeyWithEvent(sql, operatorOrigin(), accountId, accountId, keyId)
    if (row === null) throw new UsageError(`account ${accountId} has no key ${keyId}`)
    // Replicas cache keys: tell them now, or they notice within their in-process TTL (docs/internals.md, caches).
    if (config.redis !== undefined)
      await tellReplicas(
        config.redis,
        config.redisKeyPrefix,
        keyEntries({ id: row.id, keyDigest: row.key_digest }),
        'the key is revoked',
        io,
      )
    return { key: presentKey(row) }
  },

  'keys roll': async (sql, options, config, io) => {
    const accountId = uuid(options, 'account')
    const keyId = uuid(options, 'key')
    const overlap = overlapSeconds(options)
    await migrate(sql)
    await parentAccount(sql, accountId)
    // Parent keys have no client secret.
    const result = await rollKey(sql, {
      tenantId: accountId,
      keyId,
      overlapSeconds: overlap,
      withClientSecret: false,
      origin: operatorOrigin(),
      accountId,
    })
    if (result.outcome === 'not_found') throw new UsageError(`account ${accountId} has no key ${keyId}`)
    if (result.outcome === 'not_active')
      throw new UsageError(`key ${keyId} is ${result.state}: only an active key can be rolled`)
    const { old, minted } = result
    // The old key's expiry moved (or it is revoked), and the new key may be cached as unknown.
    if (config.redis !== undefined)
      await tellReplicas(
        config.redis,
        config.redisKeyPrefix,
        [
          ...keyEntries({ id: old.id, keyDigest: old.key_digest }),
          ...keyEntries({ id: minted.row.id, keyDigest: minted.keyDigest }),
        ],
        'the key is rolled',
        io,
      )
    return { key: presentKey(minted.row), api_key: minted.apiKey, previous_key: presentKey(old) }
  },
}
