// The store deadlines of a test's gateway (src/store/deadlines.ts): a loaded machine may queue a
// query past 500 ms, and a test is not about that. A test of the deadlines themselves sets
// STORE_DEADLINES.
export const UNHURRIED_STORE_DEADLINES = { lookupMs: 10_000, managementMs: 15_000 }
