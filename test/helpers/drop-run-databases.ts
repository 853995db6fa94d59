// The tap runner's `after` (package.json): drops the databases of the run that has just ended, which
// its files left closed (db.ts), and those of earlier runs on this machine whose runner is gone
// without dropping them (killed, or stopped at a failure). The server's trouble is reported, not
// thrown: the run's own result stands.
// Several drops at once: each DROP DATABASE waits for a checkpoint, and Postgres serves the drops
// waiting together with one: 150 databases took 18.1-18.6 s one at a time, 15.7 s ten at a time.
import postgres from 'postgres'
import { processIsAlive } from '../../src/shared/process-alive.js'
import { ADMIN_URL, runDatabasePrefix } from './db.js'

const RUN_PATTERN = /^tgw_test_r(\d+)_[0-9a-f]+$/
const DROPS_AT_ONCE = 10

const admin = postgres(ADMIN_URL, { max: DROPS_AT_ONCE, onnotice: () => {}, connect_timeout: 10 })
try {
  const ours = runDatabasePrefix(process.ppid)
  const names = await admin<{ datname: string }[]>`
    select datname from pg_database where datname like ${'tgw\\_test\\_r%'}`
  const ended = names
    .map(({ datname }) => datname)
    .filter((datname) => {
      const runner = RUN_PATTERN.exec(datname)?.[1]
      return runner !== undefined && (datname.startsWith(ours) || !processIsAlive(Number(runner)))
    })
  // The pool runs DROPS_AT_ONCE of them at a time, and each failure is reported after all have run.
  const failures = (
    await Promise.allSettled(ended.map((datname) => admin.unsafe(`drop database if exists ${datname} with (force)`)))
  ).filter((outcome) => outcome.status === 'rejected')
  if (failures.length > 0) throw (failures[0] as PromiseRejectedResult).reason
} catch (err) {
  console.error(`the run's test databases were not all dropped: ${(err as Error).message}`)
} finally {
  await admin.end({ timeout: 5 })
}
