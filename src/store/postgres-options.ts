// The options every postgres.js client of the store shares (store/db.ts), the pools' and the
// embedded database's one connection alike.

export const COMMON_OPTIONS = {
  onnotice: () => {},
  // Connection-level timeouts, so that an unreachable database fails a request instead of hanging it.
  connect_timeout: 5,
  idle_timeout: 60,
  // No array-type query on each new connection: postgres.js 3.4.9 drops that query's promise, so
  // a connection lost during it is an unhandled rejection (test/faults/postgres-reset.test.ts).
  // Without it postgres.js neither parses nor serialises arrays: they cross as JSON instead
  // (to_jsonb on the way out, jsonb_to_recordset and jsonb_array_elements_text on the way in).
  // Beware: with it off, postgres.js 3.4.9 never hands a new connection to sql.reserve() (it
  // hangs); the gateway does not use reserve().
  fetch_types: false,
} as const
