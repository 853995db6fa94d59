// The tap runner's `after` (package.json): drops the databases of the run that has just ended, which
// its files left closed (db.ts), and those of earlier runs on this machine whose runner is gone
// without dropping them (killed, or stopped at a failure). One connection; the server's trouble is
// reported, not thrown: the run's own result stands.
import postgres from 'postgres'
import { processIsAlive } from '../../src/shared/process-alive.js'
import { ADMIN_URL, runDatabasePrefix } from './db.js'

const RUN_PATTERN = /^tgw_test_r(\d+)_[0-9a-f]+$/

const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {}, connect_timeout: 10 })
try {
  const ours = runDatabasePrefix(process.ppid)
  const names = await admin<{ datname: string }[]>`
    select datname from pg_database where datname like ${'tgw\\_test\\_r%'}`
  for (const { datname } of names) {
    const runner = RUN_PATTERN.exec(datname)?.[1]
    if (runner === undefined) continue
    if (datname.startsWith(ours) || !processIsAlive(Number(runner)))
      await admin.unsafe(`drop database if exists ${datname} with (force)`)
  }
} catch (err) {
  console.error(`the run's test databases were not all dropped: ${(err as Error).message}`)
} finally {
  await admin.end({ timeout: 5 })
}
