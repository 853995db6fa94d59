// Statements that end with their call: a heavy read answered 503 at its store deadline must not
// go on holding a pooled connection for seconds, for an answer nobody waits for (docs/operations.md,
// the heavy reads). `cancellable(sql)` is the pool as its callers know it, which remembers each
// statement made within `stoppedBy(signal, work)`; when the signal aborts, each of them that was
// sent is cancelled (Postgres's CancelRequest, postgres.js's query.cancel(); again while it is
// unanswered, CANCEL_AGAIN_AFTER_MS), each still queued
// for a connection is taken off the queue, and a statement made afterwards fails at once.
import { AsyncLocalStorage } from 'node:async_hooks'
import type { RequestTrace } from '../shared/request-trace.js'
import type { Sql } from './db.js'
import { type SpannedQuery, spanWhenRun } from './statement-spans.js'

/** What is thrown by a statement made after its call was stopped. */
export class StatementsStoppedError extends Error {
  /** query_canceled, as Postgres names a cancelled statement: the error handler answers 503. */
  readonly code = '57014'
  constructor() {
    super('the call was answered already: its statements are stopped')
    this.name = 'StatementsStoppedError'
  }
}

/** postgres.js's Query, as far as a cancel needs it (postgres/src/query.js, 3.4.9). */
interface PendingQuery extends SpannedQuery {
  /** Set when the query was handed to the pool (awaited): a fragment or an unused query never is. */
  executed?: boolean
  /** The pool's canceller, cleared by postgres.js once used: ours is called directly, so that its failure has a listener. */
  canceller?: ((query: PendingQuery) => Promise<void>) | null
  /** A Query is a promise: it settles when Postgres answers the statement, or fails it. */
  then?: (onAnswer: () => void, onError: () => void) => unknown
}

interface Call {
  readonly made: Set<PendingQuery>
  stopped: boolean
  /**
   * `work` has settled: a statement made after it (a stream the handler answered with, read on in
   * the call's async context: a key import's later batches) is not remembered, else each would be
   * held, with its rows, until the process ends.
   */
  ended: boolean
  /** The request's trace, sampled: each statement of the call is a span of it (statement-spans.ts). */
  readonly trace: RequestTrace | null
}

const current = new AsyncLocalStorage<Call>()

/**
 * When a statement still unanswered is cancelled again, in ms after the first cancel. Postgres
 * drops a CancelRequest that reaches the backend before it has read the statement (it cancels only
 * a running one), and the statement then runs to its statement_timeout (60 s for a heavy read,
 * store/db.ts). Sent only while postgres.js has not answered the statement, so only while it is
 * the one its backend is on: bounded, so that a statement that will not stop costs three cancels.
 */
export const CANCEL_AGAIN_AFTER_MS: readonly number[] = [100, 1_000, 5_000]

function cancel(query: PendingQuery): void {
  const canceller = query.canceller
  // Made before the stop, not yet handed to the pool: if it is awaited after, it must never reach
  // Postgres (it would run on, uncancelled). A fragment, never awaited, is left as it is.
  if (!query.executed) {
    if (typeof query.handle === 'function')
      query.handle = async function (this: PendingQuery) {
        if (this.executed) return
        this.executed = true
        this.reject?.(new StatementsStoppedError())
      }
    return
  }
  if (typeof canceller !== 'function') return
  query.canceller = null
  // A cancel that cannot reach Postgres fails on its own connection; the statement's own error (or
  // its answer) still goes to the call.
  const send = () => void canceller(query).catch(() => {})
  send()
  let again: NodeJS.Timeout | undefined
  let sent = 0
  const answered = () => clearTimeout(again)
  const sendAgain = () => {
    send()
    sent += 1
    if (sent < CANCEL_AGAIN_AFTER_MS.length)
      again = setTimeout(sendAgain, CANCEL_AGAIN_AFTER_MS[sent]! - CANCEL_AGAIN_AFTER_MS[sent - 1]!).unref()
  }
  again = setTimeout(sendAgain, CANCEL_AGAIN_AFTER_MS[0]).unref()
  // The statement's answer, or its error (the cancel's 57014), ends the repeats: the call's own
  // handler has the outcome, this one only listens.
  query.then?.(answered, answered)
}

/**
 * Runs `work`, whose statements through a `cancellable` pool are cancelled when `signal` aborts,
 * and, when `trace` is sampled, are each a span of it.
 * Returns what `work` returns: a promise settles as `work`'s does. `work` is entered at once, so a
 * route's handler may be run through it as it is (management/hooks.ts); one that answers later
 * through its reply, returning nothing, keeps its statements stoppable until its request is gone.
 */
export function stoppedBy<T>(signal: AbortSignal, work: () => T, trace: RequestTrace | null = null): T {
  const call: Call = {
    made: new Set(),
    stopped: signal.aborted,
    ended: false,
    trace: trace?.sampled === true ? trace : null,
  }
  const stop = () => {
    call.stopped = true
    for (const query of call.made) cancel(query)
    call.made.clear()
  }
  signal.addEventListener('abort', stop, { once: true })
  const done = () => {
    call.ended = true
    signal.removeEventListener('abort', stop)
    call.made.clear()
  }
  let result: T
  try {
    result = current.run(call, work)
  } catch (err) {
    done()
    throw err
  }
  if (result instanceof Promise) return result.finally(done) as T
  return result
}

/**
 * The call under way can be stopped no more (its answer is on its way: management/hooks.ts
 * stopStoreDeadline): its statements, made and to come, are no longer remembered. A handler that
 * answers with its reply (a thenable fastify settles once the answer is sent) settles only when a
 * streamed answer ends: a key import's batches, each remembered with its rows until then, ran a
 * 100,000-line import out of the image's 160 MiB heap.
 */
export function unstoppable(): void {
  const call = current.getStore()
  if (call === undefined) return
  call.ended = true
  call.made.clear()
}

/** Remembers `made` in the call under way, if any; refuses it if that call was stopped. */
function remember<T>(made: T): T {
  const call = current.getStore()
  if (call === undefined || typeof made !== 'object' || made === null || !('cancel' in made)) return made
  if (call.stopped) throw new StatementsStoppedError()
  if (!call.ended) call.made.add(made as PendingQuery)
  if (call.trace !== null) spanWhenRun(made as PendingQuery, call.trace)
  return made
}

/**
 * `sql` whose statements (tagged, `unsafe`, and those of its transactions, savepoints aside: no
 * heavy read makes one) made within
 * `stoppedBy` are cancelled when that call is stopped; outside it, `sql` itself.
 */
export function cancellable(sql: Sql): Sql {
  const unsafe: Sql['unsafe'] = (...args) => remember(sql.unsafe(...args))
  // postgres.js hands a transaction its own `tx`: made cancellable too, so are its statements.
  const begin = ((...args: unknown[]) => {
    const work = args.pop() as (tx: Sql) => unknown
    return (sql.begin as (...a: unknown[]) => unknown)(...args, (tx: Sql) => work(cancellable(tx)))
  }) as Sql['begin']
  return new Proxy(sql, {
    apply: (target, thisArg, args) => remember(Reflect.apply(target, thisArg, args)),
    get: (target, property, receiver) => {
      if (property === 'unsafe') return unsafe
      if (property === 'begin') return begin
      return Reflect.get(target, property, receiver)
    },
  })
}
