// On a Redis cluster a script, a MULTI and an MGET must keep to one slot (docs/internals.md,
// Redis beyond one server): each key the gateway touches together with another shares its slot.
import t from 'tap'
import { cacheKeys, entryKey, generationKey } from '../../src/cache/entry-names.js'
import { limitKeys, LIMIT_GROUPS } from '../../src/limits/keys.js'

/** CRC16-XMODEM modulo 16384 of the hash tag, as Redis Cluster computes a key's slot. */
function slotOf(key: string): number {
  const open = key.indexOf('{')
  const close = open < 0 ? -1 : key.indexOf('}', open + 1)
  const hashed = open >= 0 && close > open + 1 ? key.slice(open + 1, close) : key
  let crc = 0
  for (const byte of Buffer.from(hashed, 'utf8')) {
    crc ^= byte << 8
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
  }
  return crc % 16384
}

t.test("the slot function is the cluster's (values from CLUSTER KEYSLOT)", async (t) => {
  t.equal(slotOf('foo'), 12182)
  t.equal(slotOf('{user1000}.following'), slotOf('{user1000}.followers'))
  t.equal(slotOf('123456789'), 0x31c3 % 16384)
})

t.test('a cache entry and its generation share a slot, whatever the entry holds', async (t) => {
  const names = [
    cacheKeys.key(Buffer.alloc(32, 7)),
    cacheKeys.keyById('6f1c1a52-2f7b-4f3e-9c55-0d6b6d3c8a11'),
    cacheKeys.tenant('6f1c1a52-2f7b-4f3e-9c55-0d6b6d3c8a11'),
    cacheKeys.subAccount('p', 's'),
    // An external id is the parent's to choose: braces included.
    cacheKeys.externalId('p', 'acme}{x'),
    cacheKeys.externalId('p', '{'),
    cacheKeys.anyActive('p'),
  ]
  for (const prefix of ['tgw:', 'deploy-2.cache:'])
    for (const name of names)
      t.equal(slotOf(entryKey(prefix, name)), slotOf(generationKey(prefix, name)), `${prefix}${name}`)
  const slots = new Set(names.map((name) => slotOf(entryKey('tgw:', name))))
  t.ok(slots.size > 1, 'entries are spread over slots, not all in one')
})

t.test("a limit's keys share a slot with their group's incarnation", async (t) => {
  const groups = new Set<string>()
  for (let i = 0; i < 200; i++) {
    const subject = `sub_account:${i.toString(16).padStart(8, '0')}-1111-4111-8111-111111111111`
    const rate = limitKeys.rate('tgw:', subject)
    const quota = limitKeys.quota('tgw:', subject, '2026-11')
    t.equal(slotOf(rate), slotOf(limitKeys.incarnationOf('tgw:', rate)), rate)
    t.equal(slotOf(quota), slotOf(limitKeys.incarnationOf('tgw:', quota)), quota)
    t.equal(slotOf(quota), slotOf(limitKeys.reportOf(quota, '0123456789abcdef')), "a quota's reports")
    t.equal(slotOf(rate), slotOf(quota), 'the rate and the quota of one subject are together')
    groups.add(limitKeys.incarnationOf('tgw:', rate))
  }
  t.equal(groups.size, LIMIT_GROUPS, 'every group is used')
  t.same(new Set(limitKeys.incarnations('tgw:')), groups, 'incarnations() lists them all')
})
