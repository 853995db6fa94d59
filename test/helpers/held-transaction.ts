// A transaction that ran a statement and holds its locks (and its snapshot) until the test lets
// it go: a read or a write under way, for tests of what waits behind what.
import postgres from 'postgres'

/** Runs `statement` in a transaction on a connection of its own; the function returned ends it. */
export async function holding(url: string, statement: string): Promise<() => Promise<void>> {
  const sql = postgres(url, { max: 1, onnotice: () => {}, fetch_types: false })
  let release!: () => void
  const released = new Promise<void>((resolve) => (release = resolve))
  let ran!: () => void
  const hasRun = new Promise<void>((resolve) => (ran = resolve))
  const done = sql
    .begin(async (tx) => {
      await tx.unsafe(statement)
      ran()
      await released
    })
    .finally(() => sql.end({ timeout: 1 }))
  await hasRun
  return async () => {
    release()
    await done
  }
}
