// Failed client authentications at the token endpoint (src/oauth/client-lockout.ts,
// docs/credentials.md): ten within a minute from one address lock the client id there until the
// oldest is a minute old.
import t from 'tap'
import { clientAddressKey, FailedClientAttempts } from '../../src/oauth/client-lockout.js'
import { OAuthError } from '../../src/oauth/errors.js'

const HOME = '192.0.2.7'

function lockedFor(attempts: FailedClientAttempts, id: string, address = HOME): number | null {
  try {
    attempts.refuseIfLocked(id, address)
    return null
  } catch (err) {
    if (!(err instanceof OAuthError)) throw err
    t.equal(err.status, 429)
    t.equal(err.error, 'invalid_client')
    return Number(err.headers['retry-after'])
  }
}

t.test('ten failures in a minute lock the id until the oldest is a minute old', async (t) => {
  let now = 1_000_000
  const attempts = new FailedClientAttempts(() => now)
  for (let i = 0; i < 9; i++) {
    attempts.failed('client', HOME)
    now += 1_000
  }
  t.equal(lockedFor(attempts, 'client'), null, 'nine failures: not locked')
  attempts.failed('client', HOME)
  t.equal(lockedFor(attempts, 'client'), 51, 'the tenth locks it: the oldest ends 51 s from now')
  t.equal(lockedFor(attempts, 'CLIENT'), 51, 'whatever the case of the id')
  t.equal(lockedFor(attempts, 'other'), null, 'another id is not locked')
  now += 50_500
  t.equal(lockedFor(attempts, 'client'), 1, 'Retry-After is at least 1 s')
  now += 500
  t.equal(lockedFor(attempts, 'client'), null, 'once the oldest is a minute old, nine remain: unlocked')
  attempts.failed('client', HOME)
  t.ok(lockedFor(attempts, 'client')! > 0, 'one more failure locks it again')
  attempts.succeeded('client', HOME)
  t.equal(lockedFor(attempts, 'client'), null, 'a success forgets them all')
})

t.test('failures older than a minute are forgotten', async (t) => {
  let now = 0
  const attempts = new FailedClientAttempts(() => now)
  for (let i = 0; i < 10; i++) attempts.failed('slow', HOME)
  now += 60_001
  t.equal(lockedFor(attempts, 'slow'), null, 'a minute later')
  for (let i = 0; i < 9; i++) attempts.failed('slow', HOME)
  t.equal(lockedFor(attempts, 'slow'), null, 'nine new ones do not lock it')
})

t.test('attempts under way count against the limit: a burst waits, it does not pass unchecked', async (t) => {
  const attempts = new FailedClientAttempts()
  const started: (() => void)[] = []
  const outcomes: string[] = []
  const wrong = () =>
    attempts
      .attempt(
        'burst',
        HOME,
        () =>
          new Promise<never>((_, reject) => started.push(() => reject(new OAuthError(401, 'invalid_client', 'no')))),
      )
      .then(
        () => outcomes.push('passed'),
        (err: OAuthError) => outcomes.push(String(err.status)),
      )
  const burst = Array.from({ length: 15 }, wrong)
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(started.length, 10, 'ten started, five wait')
  for (const fail of started.splice(0)) fail()
  await Promise.all(burst)
  t.equal(started.length, 0, 'no more were checked')
  t.same(outcomes.sort(), [...Array(10).fill('401'), ...Array(5).fill('429')])

  const right = await Promise.all(Array.from({ length: 25 }, () => attempts.attempt('busy', HOME, async () => 'token')))
  t.equal(right.length, 25, 'right secrets at once all pass')
  const failing = attempts.attempt('store', HOME, async () => {
    throw new Error('store down')
  })
  await t.rejects(failing, { message: 'store down' }, 'a failure of the store is no failed authentication')
  t.equal(lockedFor(attempts, 'store'), null)
})

t.test('the count is per address: failures from one never lock the id out of another', async (t) => {
  const attempts = new FailedClientAttempts()
  for (let i = 0; i < 10; i++) attempts.failed('client', '198.51.100.1')
  t.ok(lockedFor(attempts, 'client', '198.51.100.1')! > 0, 'locked from the address that failed')
  t.equal(lockedFor(attempts, 'client', '198.51.100.2'), null, 'not from another')
  t.ok(lockedFor(attempts, 'client', '::ffff:198.51.100.1')! > 0, 'the same IPv4 address, mapped into IPv6')
  for (let i = 0; i < 10; i++) attempts.failed('client', '2001:db8:1:2:aaaa::1')
  t.ok(lockedFor(attempts, 'client', '2001:db8:1:2:ffff:ffff:ffff:ffff')! > 0, 'anywhere in the same IPv6 /64')
  t.equal(lockedFor(attempts, 'client', '2001:db8:1:3::1'), null, 'not from the next /64')
})

t.test('clientAddressKey: IPv4, mapped IPv4, IPv6 /64 in any spelling', async (t) => {
  t.equal(clientAddressKey('127.0.0.1'), '127.0.0.1')
  t.equal(clientAddressKey('::ffff:127.0.0.1'), '127.0.0.1')
  t.equal(clientAddressKey('::FFFF:10.0.0.1'), '10.0.0.1')
  t.equal(clientAddressKey('::1'), '0:0:0:0::/64')
  t.equal(clientAddressKey('2001:db8::1'), '2001:db8:0:0::/64')
  t.equal(clientAddressKey('2001:0DB8:0000:0000:1:2:3:4'), '2001:db8:0:0::/64')
  t.equal(clientAddressKey('2001:db8:a:b:c:d:1.2.3.4'), '2001:db8:a:b::/64')
  t.equal(clientAddressKey('fe80::1%eth0'), 'fe80:0:0:0::/64')
  t.equal(clientAddressKey(undefined), '-')
})
