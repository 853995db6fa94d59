// IP allow-list entries and matching (src/guardrails/ip-allowlist.ts): what an entry may be, and
// which clients a list lets in, IPv4 and IPv6 kept apart but for the IPv4-mapped form.
import t from 'tap'
import { allowsAddress, cidrProblem } from '../../src/guardrails/ip-allowlist.js'

t.test('entries: addresses and CIDRs of either family; no zone, no range that holds all of IPv4', async (t) => {
  for (const entry of ['203.0.113.7', '203.0.113.0/24', '0.0.0.0/0', '2001:db8::/32', '::1', '::ffff:0:0/96', '::/96'])
    t.equal(cidrProblem(entry), null, `${entry} is accepted`)
  for (const entry of ['::/0', '::/1', '::/80', '0:0:0:0:0:ffff::/95'])
    t.match(cidrProblem(entry), /covers ::ffff:0:0\/96, so every IPv4 client too/, `${entry} is refused`)
  t.match(cidrProblem('fe80::1%eth0'), /zone/)
  t.match(cidrProblem('fe80::%eth0/64'), /zone/)
  t.match(cidrProblem('10.0.0.0/33'), /prefix length that is not 0 to 32/)
  t.match(cidrProblem('example.com'), /is not an IPv4 or IPv6 address/)
})

t.test('matching: an IPv6 range does not take IPv4 clients; the mapped form does', async (t) => {
  t.equal(allowsAddress(['2001:db8::/32'], '127.0.0.1'), false)
  t.equal(allowsAddress(['2001:db8::/32'], '2001:db8::5'), true)
  t.equal(allowsAddress(['::ffff:127.0.0.1'], '127.0.0.1'), true, 'an IPv4 address spelled as IPv6')
  t.equal(allowsAddress(['127.0.0.0/8'], '::ffff:127.0.0.9'), true, 'an IPv4-mapped client is IPv4')
  t.equal(allowsAddress(['127.0.0.1'], '::1'), false)
})
