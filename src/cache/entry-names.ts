// The names the caches use: of an entry (the same in the in-process LRU, in Redis after the
// prefix, and on the bus), of its generation in Redis, and of the invalidation channel.
// docs/internals.md (caches) says what each entry holds and who invalidates it.

/** Names of cache entries; the same names are used in Redis (after the prefix) and on the bus. */
export const cacheKeys = {
  key: (keyDigest: Buffer) => `key:${keyDigest.toString('hex')}`,
  /** A key found by its id, as an access token names it. */
  keyById: (keyId: string) => `keyid:${keyId}`,
  tenant: (tenantId: string) => `tenant:${tenantId}`,
  /**
   * A sub-account as its parent names it in the acting header: another parent's sub-account and an
   * id that does not exist are both "not found" here, cached alike
   * (docs/decisions/0030-not-yours-and-no-such-take-the-same-time-too.md).
   */
  subAccount: (parentId: string, id: string) => `sub:${parentId}:${id}`,
  externalId: (parentId: string, externalId: string) => `ext:${parentId}:${externalId}`,
  // Renamed from active:<parent> (a count) when it became a boolean: replicas of the two versions
  // running side by side during a deploy never read each other's value.
  anyActive: (parentId: string) => `anyActive:${parentId}`,
  /**
   * A plan's limits (docs/api.md, Plans). Tenant records name their plan by id, so a change of a
   * plan drops this one entry on every replica, whatever the number of its sub-accounts.
   */
  plan: (planId: string) => `plan:${planId}`,
  /**
   * Never stored: a name on the bus only, that tells replicas to load the signing keys again
   * (signing-keys/sync.ts).
   */
  signingKeys: 'signing-keys',
}

/** The Redis channel every replica of one deployment (one prefix) listens on for invalidations. */
export const invalidationChannel = (keyPrefix: string) => `${keyPrefix}invalidate`

/**
 * An entry's name in Redis. Its name is a hash tag (`{…}`), shared with its generation: the read
 * (MGET) and the conditional store (a script) of the two touch one slot on a cluster. The prefix
 * holds no brace (config-redis.ts), so the tag is the entry's name up to its first `}`, if it has one
 * (an external id may), the same in both keys.
 */
export const entryKey = (keyPrefix: string, key: string) => `${keyPrefix}{${key}}`

/**
 * Each entry has a generation in Redis, bumped by every invalidation of it. A fill reads the
 * generation with the entry, and stores what it read from Postgres only if the generation has not
 * moved since: otherwise an invalidation came in between, and the row it read may be the old one.
 * Without this, a fill that read the old row before a commit and wrote it to Redis after the
 * invalidation's delete would put a revoked key back for the whole Redis TTL.
 */
export const generationKey = (keyPrefix: string, key: string) => `${keyPrefix}gen:{${key}}`

/**
 * When the Postgres read behind an entry began (ms since the epoch, by the clock of the replica
 * that read it), beside the entry and under its hash tag. A replica takes an entry from Redis only
 * if it is no older than what it already knows of it (an invalidation it applied, a newer read):
 * Redis may give back an entry a change deleted (a replica promoted before the delete reached it, a
 * server restored from a snapshot), and a key refused once must stay refused
 * (docs/decisions/0226-a-replica-never-takes-from-redis-an-entry-older.md). An entry without one
 * (stored by the earlier version) counts as the oldest.
 */
export const stampKey = (keyPrefix: string, key: string) => `${keyPrefix}at:{${key}}`

/**
 * The names of an entry and its generation before they were hash-tagged, which replicas of the
 * earlier version still read and write during a rolling upgrade
 * (docs/decisions/0235-key-names-changed-once.md). Never on a cluster, which the earlier version
 * could not use.
 */
export const legacyEntryKey = (keyPrefix: string, key: string) => `${keyPrefix}${key}`
export const legacyGenerationKey = (keyPrefix: string, key: string) => `${keyPrefix}gen:${key}`

/** Longer than any fill can take (Postgres gives up after its 5 s connect timeout). */
export const GENERATION_TTL_MS = 10 * 60_000

/** The entries a change of a sub-account's row makes stale: its record, and its record as its parent names it. */
export const subAccountEntries = (parentId: string, id: string): string[] => [
  cacheKeys.tenant(id),
  cacheKeys.subAccount(parentId, id),
]

/** The entries a change of a key's row makes stale: the key found by its value, and by its id. */
export const keyEntries = (key: { id: string; keyDigest: Buffer }): string[] => [
  cacheKeys.key(key.keyDigest),
  cacheKeys.keyById(key.id),
]

/**
 * Told of every in-process eviction, with the names of the entries (`keyid:<id>`, `tenant:<id>`,
 * …), or null when the whole LRU stops being trusted (messages may have been lost): what is
 * derived from the entries (the identity assertions) is dropped with them.
 */
export type EvictionListener = (names: readonly string[] | null) => void

/**
 * Whose record an entry's name holds, for what is derived from it and dropped with it: a key by id
 * (`keyid:`), a tenant (`tenant:`, and `sub:<parent>:<id>`, the sub-account as its parent names
 * it); null for the other entries (`key:<digest>` is always invalidated with its `keyid:`).
 */
export function recordOfEntry(name: string): { kind: 'key' | 'tenant'; id: string } | null {
  if (name.startsWith('keyid:')) return { kind: 'key', id: name.slice(6) }
  if (name.startsWith('tenant:')) return { kind: 'tenant', id: name.slice(7) }
  if (name.startsWith('sub:')) return { kind: 'tenant', id: name.slice(name.lastIndexOf(':') + 1) }
  return null
}
