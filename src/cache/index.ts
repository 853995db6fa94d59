// The caches of the tenancy lookups, as the rest of the gateway uses them (docs/internals.md).
export { TenancyCache } from './tiered.js'
export { publishInvalidation, type CacheInvalidator } from './invalidation-messages.js'
export { cacheKeys, type EvictionListener, keyEntries, subAccountEntries } from './entry-names.js'
export type { CacheTimings } from './settings.js'
