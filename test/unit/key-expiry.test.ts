// The rules of a key's expiry (src/shared/key-expiry.ts, docs/credentials.md): what `expires_at`
// a mint accepts, and the state a key is shown in.
import t from 'tap'
import { keyState, parseExpiresAt } from '../../src/shared/key-expiry.js'

const NOW = Date.parse('2026-11-22T12:00:00Z')

t.test('accepted: RFC 3339 date-times with a zone, in the future, at most 10 years ahead', async (t) => {
  for (const [text, iso] of [
    ['2026-11-22T12:00:01Z', '2026-11-22T12:00:01.000Z'],
    ['2026-11-22t12:00:01z', '2026-11-22T12:00:01.000Z'],
    ['2026-11-22T13:00:01+01:00', '2026-11-22T12:00:01.000Z'],
    ['2026-11-22T11:00:01.25-01:00', '2026-11-22T12:00:01.250Z'],
    ['2028-02-29T00:00:00Z', '2028-02-29T00:00:00.000Z'],
    ['2036-11-22T12:00:00Z', '2036-11-22T12:00:00.000Z'],
  ] as const) {
    const parsed = parseExpiresAt(text, NOW)
    t.ok('at' in parsed, `${text}: ${JSON.stringify(parsed)}`)
    if ('at' in parsed) t.equal(parsed.at.toISOString(), iso, text)
  }
})

t.test('refused, each with its reason', async (t) => {
  for (const [text, reason] of [
    ['2026-11-22T12:00:00Z', /future/],
    ['2026-11-22T11:59:59Z', /future/],
    ['2036-11-22T12:00:00.001Z', /10 years/],
    ['2027-02-29T00:00:00Z', /RFC 3339/],
    ['2027-04-31T00:00:00Z', /RFC 3339/],
    ['2027-00-10T00:00:00Z', /RFC 3339/],
    ['2027-01-10T24:00:00Z', /RFC 3339/],
    ['2027-01-10T23:60:00Z', /RFC 3339/],
    ['2027-06-30T23:59:60Z', /RFC 3339/],
    ['2027-01-10T00:00:00+24:00', /RFC 3339/],
    ['2027-01-10T00:00:00+0100', /RFC 3339/],
    ['2027-01-10T00:00:00', /RFC 3339/],
    ['2027-01-10 00:00:00Z', /RFC 3339/],
    ['2027-01-10', /RFC 3339/],
    ['+002027-01-10T00:00:00Z', /RFC 3339/],
    [' 2027-01-10T00:00:00Z', /RFC 3339/],
    ['', /RFC 3339/],
  ] as const) {
    const parsed = parseExpiresAt(text, NOW)
    t.ok('error' in parsed, `${JSON.stringify(text)} is refused`)
    if ('error' in parsed) t.match(parsed.error, reason, JSON.stringify(text))
  }
})

t.test('the state a key is shown in', async (t) => {
  const at = (ms: number) => new Date(ms)
  t.equal(keyState({ status: 'active', expires_at: null }, NOW), 'active')
  t.equal(keyState({ status: 'active', expires_at: at(NOW + 1) }, NOW), 'active')
  t.equal(keyState({ status: 'active', expires_at: at(NOW) }, NOW), 'expired', 'expired at the instant itself')
  t.equal(keyState({ status: 'revoked', expires_at: at(NOW - 1) }, NOW), 'revoked', 'revoked wins')
  t.equal(keyState({ status: 'revoked', expires_at: null }, NOW), 'revoked')
})
