// sql.begin, made safe against a connection lost in the middle
// (docs/decisions/0159-a-transaction-whose-connection-is-lost-sends.md).
//
// postgres.js 3.4.9 writes to a transaction's connection whatever the transaction does next, even
// once that connection has closed: the write runs on a null socket in a setImmediate, an uncaught
// TypeError that ends the process (porsager/postgres#1208; test/faults/transaction-lost.test.ts).
// It does so for the ROLLBACK it sends when the callback fails, for the COMMIT it sends when the
// callback ends, and for any query the callback makes after the loss (one that first awaited
// something else, such as a signing key being generated). So once the connection is gone:
// - the callback's promise never settles: postgres.js sends neither ROLLBACK nor COMMIT
//   (Postgres rolls back a transaction whose connection is gone by itself), and sql.begin()
//   still rejects with the connection's error;
// - a query the callback makes throws instead of being written.
import type { Sql, Tx } from './db.js'

const CONNECTION_LOST = new Set([
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'ECONNRESET',
  'EPIPE',
])

const isConnectionLost = (err: unknown) => CONNECTION_LOST.has(String((err as { code?: unknown })?.code))

const never = new Promise<never>(() => {})

class TransactionConnectionLostError extends Error {
  readonly code = 'CONNECTION_CLOSED'
  constructor() {
    super("the transaction's connection is gone: the query was not sent")
    this.name = 'TransactionConnectionLostError'
  }
}

/** `tx`, whose queries (a tagged template, or unsafe) throw once `isLost()`. */
function guarded(tx: Tx, isLost: () => boolean): Tx {
  const check = () => {
    if (isLost()) throw new TransactionConnectionLostError()
  }
  return new Proxy(tx, {
    apply(target, self, args) {
      check()
      return Reflect.apply(target, self, args)
    },
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver)
      if (property !== 'unsafe') return value
      return (...args: Parameters<Tx['unsafe']>) => {
        check()
        return target.unsafe(...args)
      }
    },
  })
}

export function inTransaction<T>(sql: Sql, fn: (tx: Tx) => Promise<T>): Promise<T> {
  let lost = false
  const result = sql.begin((tx) =>
    fn(guarded(tx, () => lost)).then(
      (value) => (lost ? never : value),
      (err: unknown) => (lost || isConnectionLost(err) ? never : Promise.reject(err)),
    ),
  ) as Promise<T>
  // postgres.js rejects sql.begin() as the connection closes, before the callback goes on.
  result.catch((err: unknown) => {
    if (isConnectionLost(err)) lost = true
  })
  return result
}
