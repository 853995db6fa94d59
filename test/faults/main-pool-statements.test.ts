// The main pool's statements end with what they serve (docs/operations.md, Postgres connections):
// its connections carry a statement and a lock timeout no longer than a management call's
// deadline; a management call answered 503 at its deadline has its statements cancelled at once,
// a lock still held; a background job's statement blocked by a lock ends at the timeout, and the
// job logs it and tries again at its next turn rather than hanging. The migrations run without.
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { FastifyBaseLogger } from 'fastify'
import t from 'tap'
import { IdempotencySweep } from '../../src/management/idempotency-sweep.js'
import { IDLE_IN_TRANSACTION_TIMEOUT_MS, MAIN_STATEMENT_TIMEOUT_MS, openStore } from '../../src/store/db.js'
import { STORE_DEADLINES } from '../../src/store/deadlines.js'
import { migrate } from '../../src/store/migrate.js'
import { createSubAccount } from '../../src/store/tenants.js'
import { freshDatabase } from '../helpers/db.js'
import { createParent, startGateway } from '../helpers/gateway.js'
import { holding } from '../helpers/held-transaction.js'
import { orTimeout, until } from '../helpers/poll.js'
import { watchCrashes } from './crashes.js'
import { codeOf, timedCall } from './timed-call.js'

/** How long a call may go unanswered, or a statement linger, before the test calls it a hang. */
const HANG_LIMIT_MS = 20_000

const crashes = watchCrashes(t)

t.test("the main pool's connections carry the timeouts; the migrations run without", async (t) => {
  const db = await freshDatabase(t, { migrated: false })
  const store = await openStore({ databaseUrl: db.url, dataDir: tmpdir() })
  t.teardown(() => store.close())
  t.equal(MAIN_STATEMENT_TIMEOUT_MS, STORE_DEADLINES.managementMs, "no longer than a management call's deadline")
  const [row] = await store.sql<{ statement: string; lock: string; idle: string }[]>`
    select current_setting('statement_timeout') as statement, current_setting('lock_timeout') as lock,
      current_setting('idle_in_transaction_session_timeout') as idle`
  t.same(
    row,
    {
      statement: `${MAIN_STATEMENT_TIMEOUT_MS}ms`,
      lock: `${MAIN_STATEMENT_TIMEOUT_MS}ms`,
      idle: `${IDLE_IN_TRANSACTION_TIMEOUT_MS / 1000}s`,
    },
    'SHOW through the pool',
  )
  // A migration that fails unless it runs with neither timeout: a long one must not be cut off.
  const dir = mkdtempSync(join(tmpdir(), 'migrations-'))
  writeFileSync(
    join(dir, '001_unbounded.sql'),
    `do $$ begin
       if current_setting('statement_timeout') <> '0' or current_setting('lock_timeout') <> '0' then
         raise exception 'a migration runs under the pool''s timeouts';
       end if;
     end $$;`,
  )
  t.same(await migrate(store.sql, dir), [1], 'the migration ran without the timeouts')
})

t.test('a management call answered 503 stops its statement on the main pool at once', async (t) => {
  const db = await freshDatabase(t)
  const gw = await startGateway(t, {
    database: db,
    // The gateway's pools as main.ts opens them; a statement timeout far past the call's deadline,
    // so that only the cancel can end the statement while the lock is held.
    pool: { statementTimeoutMs: 10 * HANG_LIMIT_MS },
    redis: false,
    // Long enough that the update waits on the lock when the cancel comes (a cancel that lands
    // between a statement's describe and execute steps is lost: the pool's timeout then ends it).
    storeDeadlines: { managementMs: 5_000 },
  })
  const parent = await createParent(db.sql, { name: 'parent' })
  const sub = await createSubAccount(db.sql, parent.id, { name: 'customer', externalId: null, metadata: {} })
  // The call's update waits for this row's lock, as a statement over a long history would run
  // (`no key update`: the meter's writes, which only reference the row, go on).
  const release = await holding(db.url, `select * from tenants where id = '${sub.id}' for no key update`)
  t.teardown(release)
  const waiting = async () => {
    const [row] = await db.sql<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity
      where application_name ~ '^tenancy-gateway [0-9a-f]{8}$' and wait_event_type = 'Lock'`
    return row!.n
  }

  const call = await timedCall(
    gw.url,
    parent.apiKey,
    { method: 'PATCH', path: `/v1/sub-accounts/${sub.id}`, acting: 'self', json: { name: 'renamed' } },
    HANG_LIMIT_MS,
  )
  t.equal(call.res?.status, 503, 'answered 503 at the deadline')
  t.equal(codeOf(call.res), 'store_unavailable')
  const gone = await until(HANG_LIMIT_MS, async () => (await waiting()) === 0)
  t.ok(gone, 'its statement is gone, the lock still held', {
    waiting: gone
      ? []
      : await db.sql`select application_name, state, left(query, 200) as query from pg_stat_activity where wait_event_type = 'Lock'`,
  })
  await release()
  const [row] = await db.sql<{ name: string }[]>`select name from tenants where id = ${sub.id}`
  t.equal(row!.name, 'customer', 'the cancelled update changed nothing')
  t.same(crashes, [], 'nothing escaped to the process')
})

t.test("a background job's statement blocked by a lock ends at the timeout, logged", async (t) => {
  const db = await freshDatabase(t)
  const store = await openStore({ databaseUrl: db.url, dataDir: tmpdir() })
  t.teardown(() => store.close())
  const warnings: { err: { code?: string }; message: string }[] = []
  const log = {
    warn: (details: { err: { code?: string } }, message: string) => warnings.push({ ...details, message }),
  } as unknown as FastifyBaseLogger
  const release = await holding(db.url, 'lock table idempotency_keys in access exclusive mode')
  t.teardown(release)
  const sweep = new IdempotencySweep(store.sql, log)
  t.equal(await orTimeout(sweep.sweep(), HANG_LIMIT_MS, 'hung'), undefined, 'the sweep ended, the lock still held')
  t.match(
    warnings,
    // Both timeouts are of one length: whichever Postgres checks first ends the wait.
    [{ err: { code: /^(57014|55P03)$/ }, message: /the next sweep tries again/ }],
    'logged: statement_timeout (57014) or lock_timeout (55P03), tried again at the next sweep',
  )
  await release()
  await sweep.sweep()
  t.equal(warnings.length, 1, 'the next sweep runs once the lock is gone')
})
