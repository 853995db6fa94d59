// Redis's outages in the log (src/cache/outage-notice.ts): a warning as one begins, whichever
// connection fails first; none for each attempt after; one a minute while it lasts; one line as it
// ends, once every failing connection answers again; and a new outage is said again.
import t from 'tap'
import { OUTAGE_REMINDER_MS, OutageNotice } from '../../src/cache/outage-notice.js'

t.test('once as it begins, once a minute, once as it ends', async (t) => {
  let now = 1_000_000
  const said: [string, string, unknown][] = []
  const log = {
    warn: (fields: { for_seconds?: number }, message: string) => said.push(['warn', message, fields.for_seconds]),
    info: (fields: { for_seconds?: number }, message: string) => said.push(['info', message, fields.for_seconds]),
  }
  const notice = new OutageNotice(log as never, { failed: 'redis failed', recovered: 'redis answers again' }, () => now)
  notice.recovered('commands')
  t.same(said, [], 'a first connection is no recovery')
  notice.failed('commands', new Error('ECONNREFUSED'))
  for (let i = 0; i < 30; i++) {
    now += 1_500
    notice.failed(i % 2 === 0 ? 'subscriber' : 'commands', new Error('ECONNREFUSED'))
  }
  t.same(said, [['warn', 'redis failed', undefined]], 'one warning for 45 s of attempts on both connections')
  now += OUTAGE_REMINDER_MS - 45_000
  notice.failed('commands', new Error('ECONNREFUSED'))
  t.same(said.at(-1), ['warn', 'redis failed (still)', 60], 'said again after a minute, with how long')
  now += 5_000
  notice.recovered('commands')
  t.equal(said.length, 2, 'not over while the subscriber still fails')
  notice.recovered('subscriber')
  t.same(said.at(-1), ['info', 'redis answers again', 65], 'over when both answer')
  notice.recovered('subscriber')
  notice.failed('subscriber', new Error('ECONNRESET'))
  t.same(said.at(-1), ['warn', 'redis failed', undefined], 'a new outage is said again')
  t.equal(said.length, 4)
})

t.test('an answer after a failure ends the outage, though the connection never dropped', async (t) => {
  const said: string[] = []
  const log = { warn: (_: unknown, m: string) => said.push(m), info: (_: unknown, m: string) => said.push(m) }
  const notice = new OutageNotice(log as never, { failed: 'failed', recovered: 'back' })
  notice.failed('commands', new Error('timeout'))
  notice.recovered('commands')
  notice.failed('commands', new Error('timeout'))
  t.same(said, ['failed', 'back', 'failed'], 'each outage said as it begins, and its end')
})
