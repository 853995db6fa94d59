// The caches of the tenancy lookups, as the rest of the gateway uses them (docs/architecture.md).
export { TenancyCache } from './tiered.js'
export { publishInvalidation, type CacheInvalidator } from './invalidation.js'
export { cacheKeys } from './keys.js'
export { DEFAULT_TIMINGS, REDIS_COMMAND_TIMEOUT_MS, type CacheTimings, type TenancyCacheOptions } from './settings.js'
