// The sweep of expired idempotency keys (docs/api.md, Idempotency): batch after batch until a
// short one, live rows left alone, and a failing store logged rather than thrown.
import type { FastifyBaseLogger } from 'fastify'
import t from 'tap'
import { IDEMPOTENCY_SWEEP_BATCH, IdempotencySweep } from '../../src/management/idempotency-sweep.js'
import type { Sql } from '../../src/store/db.js'
import { freshDatabase } from '../helpers/db.js'
import { createParent } from '../helpers/gateway.js'
import { eventually } from '../helpers/poll.js'

function recordingLog(): { log: FastifyBaseLogger; warnings: string[] } {
  const warnings: string[] = []
  const log = { warn: (_details: unknown, message: string) => warnings.push(message) } as unknown as FastifyBaseLogger
  return { log, warnings }
}

t.test('expired rows are deleted in batches; live ones stay', async (t) => {
  const db = await freshDatabase(t)
  const { keyId } = await createParent(db.sql)
  const expired = IDEMPOTENCY_SWEEP_BATCH * 2 + 5
  await db.sql`
    insert into idempotency_keys (key_id, idempotency_key, fingerprint, claim, expires_at, status, headers, body)
    select ${keyId}, 'old-' || n, '\\x00', gen_random_uuid(), now() - interval '1 second', 201, '{}', '\\x00'
    from generate_series(1, ${expired}) n`
  await db.sql`
    insert into idempotency_keys (key_id, idempotency_key, fingerprint, claim, expires_at)
    values (${keyId}, 'live', '\\x00', gen_random_uuid(), now() + interval '1 hour')`
  const { log, warnings } = recordingLog()
  await new IdempotencySweep(db.sql, log).sweep()
  const rows = await db.sql<{ idempotency_key: string }[]>`select idempotency_key from idempotency_keys`
  t.same(
    rows.map((row) => row.idempotency_key),
    ['live'],
    `${expired} expired rows deleted over several batches`,
  )
  t.same(warnings, [])
})

t.test('a store that fails is logged, and the sweep ends', async (t) => {
  const failing = (() => Promise.reject(new Error('connection refused'))) as unknown as Sql
  const { log, warnings } = recordingLog()
  await new IdempotencySweep(failing, log).sweep()
  t.match(warnings, [/could not be deleted/])
})

t.test('the timer sweeps, and stops', async (t) => {
  const db = await freshDatabase(t)
  const { keyId } = await createParent(db.sql)
  await db.sql`
    insert into idempotency_keys (key_id, idempotency_key, fingerprint, claim, expires_at)
    values (${keyId}, 'old', '\\x00', gen_random_uuid(), now() - interval '1 second')`
  const { log } = recordingLog()
  const sweep = new IdempotencySweep(db.sql, log, 10)
  sweep.start()
  const count = async () => (await db.sql<{ n: number }[]>`select count(*)::int as n from idempotency_keys`)[0]!.n
  const swept = await eventually(10_000, async () => (await count()) === 0)
  await sweep.stop()
  t.not(swept, null, 'swept by the timer')
})
