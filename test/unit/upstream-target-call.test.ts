// What an answer or a failure says of its target (proxy/upstreams/target-call.ts): the target's
// own 502/503/504 and network faults count against it; an abort of the gateway's own or a request
// body's failure says nothing.
import t from 'tap'
import { errorOutcome, statusOutcome } from '../../src/proxy/upstreams/target-call.js'

t.test('statuses', async (t) => {
  for (const status of [502, 503, 504]) t.equal(statusOutcome(status), 'failure', `${status}`)
  for (const status of [200, 301, 404, 500, 501, 505]) t.equal(statusOutcome(status), 'success', `${status}`)
})

t.test('errors', async (t) => {
  const coded = (code: string) => Object.assign(new Error(code), { code })
  for (const code of [
    'ECONNREFUSED',
    'ECONNRESET',
    'UND_ERR_SOCKET',
    'UND_ERR_HEADERS_TIMEOUT',
    'UND_ERR_CONNECT_TIMEOUT',
  ])
    t.equal(errorOutcome(coded(code)), 'failure', code)
  t.equal(errorOutcome(new Error('x', { cause: coded('ECONNRESET') })), 'failure', 'a code in the cause')
  t.equal(errorOutcome(new Error('the client left')), 'neutral', "the gateway's own abort")
  t.equal(errorOutcome(coded('UND_ERR_ABORTED')), 'neutral', 'an abort')
  t.equal(errorOutcome(new Error('x', { cause: new Error('body too large') })), 'neutral', "a body's failure")
})
