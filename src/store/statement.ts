// SQL text built together with its parameters ($1, $2, … in order), run as one prepared
// statement. For the statements that write a change with its event: the same statement made of
// postgres.js's nested fragments cost the gateway about 190 µs of CPU more a write than this
// (bench/README.md, bench:events).
import type { Sql, Tx } from './db.js'

type Db = Sql | Tx
type Parameter = Parameters<Sql['unsafe']>[1] extends (infer P)[] | undefined ? P : never

export class Statement {
  readonly values: Parameter[] = []

  /** The placeholder of `value`, a parameter of the statement. */
  param(value: Parameter): string {
    this.values.push(value)
    return `$${this.values.length}`
  }

  /** The placeholder of `value` sent as JSON. */
  json(db: Db, value: unknown): string {
    return this.param(db.json(value as Parameters<Sql['json']>[0]) as Parameter)
  }

  /**
   * Runs `text`, which holds this statement's placeholders. Prepared: after a few executions
   * Postgres keeps a generic plan for the connection and plans it no more.
   */
  run<T extends readonly object[]>(db: Db, text: string): Promise<T> {
    return db.unsafe(text, this.values, { prepare: true }) as unknown as Promise<T>
  }

  /**
   * Runs `text` unprepared, so that Postgres plans it for these values every time: for the range
   * reads (usage; the audit log by time or type), whose best plan depends on how many rows the
   * range holds (a generic plan read a whole range for every page, 627 ms at 100,000
   * sub-accounts). One more round trip.
   */
  runPlannedEachTime<T extends readonly object[]>(db: Db, text: string): Promise<T> {
    return db.unsafe(text, this.values, { prepare: false }) as unknown as Promise<T>
  }
}
