// sql.begin, made safe against a connection lost in the middle (docs/decisions.md, Events).
//
// When a transaction's connection closes, postgres.js 3.4.9 rejects sql.begin() (its onclose), but
// also rejects the callback's pending query, and then sends ROLLBACK on the dead connection: its
// write runs on a null socket in a setImmediate, an uncaught TypeError that ends the process
// (porsager/postgres#1208; test/faults/events-cut.test.ts). So a query error that says the
// connection is gone never settles the callback: postgres.js sends no ROLLBACK (Postgres rolls
// back a transaction whose connection is gone by itself), and sql.begin() still rejects with the
// connection's error.
import type { Sql, Tx } from './db.js'

const CONNECTION_LOST = new Set([
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'ECONNRESET',
  'EPIPE',
])

const isConnectionLost = (err: unknown) => CONNECTION_LOST.has(String((err as { code?: unknown })?.code))

export function inTransaction<T>(sql: Sql, fn: (tx: Tx) => Promise<T>): Promise<T> {
  return sql.begin((tx) =>
    fn(tx).catch((err: unknown) => {
      if (isConnectionLost(err)) return new Promise<never>(() => {})
      throw err
    }),
  ) as Promise<T>
}
