// X-Forwarded-For behind TRUSTED_PROXIES (src/guardrails/caller-address.ts,
// docs/api.md#key-policies-and-ip-allow-lists): an entry that is not an address is read as absent,
// so that the client address is always one.
import type { IncomingMessage } from 'node:http'
import t from 'tap'
import { forwardedAddresses, keepForwardedAddresses } from '../../src/guardrails/caller-address.js'

t.test('addresses are kept, in order; anything else is dropped', async (t) => {
  const cases: [string, string][] = [
    ['203.0.113.9', '203.0.113.9'],
    ['203.0.113.9, 10.0.0.1', '203.0.113.9, 10.0.0.1'],
    ['203.0.113.9,10.0.0.1', '203.0.113.9,10.0.0.1'],
    ['2001:db8::1', '2001:db8::1'],
    ['::ffff:203.0.113.9', '::ffff:203.0.113.9'],
    ['<script>alert(1)</script>', ''],
    ['<script>, 203.0.113.9', '203.0.113.9'],
    ['203.0.113.9, <script>', '203.0.113.9'],
    ['203.0.113.9 , unknown ,10.0.0.1', '203.0.113.9, 10.0.0.1'],
    ['unknown', ''],
    ['203.0.113.9:4711', ''],
    ['[2001:db8::1]', ''],
    ['[2001:db8::1]:443', ''],
    ['fe80::1%eth0', ''],
    ['1', ''],
    ['0x7f.0.0.1', ''],
    ['010.0.0.1', ''],
    ['256.1.1.1', ''],
    ['203.0.113.9,, 10.0.0.1', '203.0.113.9, 10.0.0.1'],
    ['', ''],
    [' , ', ''],
  ]
  for (const [header, expected] of cases) t.equal(forwardedAddresses(header), expected, JSON.stringify(header))
})

t.test('the hook rewrites the header only when an entry goes', async (t) => {
  const run = (headers: IncomingMessage['headers']) => {
    let called = 0
    keepForwardedAddresses({ raw: { headers } as IncomingMessage }, null, () => called++)
    t.equal(called, 1, 'done once')
    return headers
  }
  t.same(run({ 'x-forwarded-for': '<x>, 203.0.113.9' }), { 'x-forwarded-for': '203.0.113.9' })
  t.same(run({ 'x-forwarded-for': 'junk' }), { 'x-forwarded-for': '' })
  t.same(run({ 'x-forwarded-for': '203.0.113.9' }), { 'x-forwarded-for': '203.0.113.9' })
  t.same(run({ host: 'a' }), { host: 'a' }, 'none: nothing added')
})
