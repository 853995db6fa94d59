// A management or portal call's Postgres statements as spans of its trace (docs/operations.md,
// Traces): a span per statement the call runs, from the moment postgres.js is asked for it to its
// answer, named by its operation (`SELECT`, `INSERT`…) and attributed with `db.system.name` and
// `db.operation.name` as the database semantic conventions say: never the statement's text or
// its values. Made by call-statements.ts, which sees every statement of a call, for a sampled
// trace only.
import type { RequestTrace } from '../shared/request-trace.js'

/** postgres.js's Query, as far as a span needs it (postgres/src/query.js, 3.4.9). */
export interface SpannedQuery {
  /** The statement's text around its parameters (a tagged template's strings, or `unsafe`'s one). */
  strings?: readonly string[]
  /** Set once the statement was handed to the pool. */
  executed?: boolean
  /** Hands the statement to the pool, once: every way of awaiting it (then, execute, forEach) calls it. */
  handle?: () => Promise<void>
  /** Settle the statement: postgres.js calls them with its answer or its error. */
  resolve?: (value: unknown) => void
  reject?: (error: unknown) => void
  /** A cursor's: it answers in batches, each replacing `resolve`, and is not spanned. */
  cursorFn?: unknown
}

/** The first operation a statement names: the conventions' `db.operation.name` for SQL. */
const OPERATION =
  /\b(select|insert|update|delete|merge|copy|values|call|lock|notify|listen|unlisten|truncate|set|show|do)\b/i

/** Each tagged template's operation, found once: its strings are the same array at every call. */
const operations = new WeakMap<readonly string[], string>()

function operationOf(strings: readonly string[]): string {
  let operation = operations.get(strings)
  if (operation === undefined) {
    operation = 'QUERY'
    for (const text of strings) {
      const found = OPERATION.exec(text)
      if (found !== null) {
        operation = found[1]!.toUpperCase()
        break
      }
    }
    operations.set(strings, operation)
  }
  return operation
}

/**
 * Makes `query` a span of `trace` when it runs: started when the pool is asked for it, ended by its
 * answer or its error (`error.type`: the Postgres SQLSTATE, else the error's name). A fragment,
 * never run, makes none; neither does a cursor.
 */
export function spanWhenRun(query: SpannedQuery, trace: RequestTrace): void {
  const handle = query.handle
  if (typeof handle !== 'function' || query.executed) return
  query.handle = function (this: SpannedQuery) {
    if (!this.executed && this.cursorFn === undefined && this.strings !== undefined) {
      const operation = operationOf(this.strings)
      const span = trace.work(operation, { system: 'postgresql', operation })
      const resolve = this.resolve
      const reject = this.reject
      if (resolve !== undefined && reject !== undefined) {
        this.resolve = (value) => {
          span.end()
          resolve(value)
        }
        this.reject = (error) => {
          const code = (error as { code?: unknown } | null)?.code
          span.end(typeof code === 'string' ? code : ((error as Error | null)?.name ?? 'Error'))
          reject(error)
        }
      } else span.end()
    }
    return handle.call(this)
  }
}
