// The store deadlines of a test's gateway (src/store/deadlines.ts): a loaded machine may queue a
// query past 500 ms, and a test is not about that. A test of the deadlines themselves sets
// STORE_DEADLINES.
export const UNHURRIED_STORE_DEADLINES = { lookupMs: 10_000, managementMs: 15_000 }

/**
 * The lookup batchers' pace for the flood tests (STORE_DEADLINES.lookupIntervalMs is 5 ms: 200
 * queries a second): 40 a second, which a flood from a loaded machine still outruns many times.
 */
export const FLOOD_LOOKUP_INTERVAL_MS = 25
