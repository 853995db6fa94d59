// The special-purpose address registry (src/webhooks/special-purpose-addresses.ts): every block is
// refused from its first address to its last, the addresses just outside pass (or fall in the
// neighbouring block), and the blocks issue 28 named are all there, with what a refusal says.
import t from 'tap'
import { ipv6Groups } from '../../src/webhooks/embedded-ipv4.js'
import { SPECIAL_PURPOSE_BLOCKS, specialPurposeBlock } from '../../src/webhooks/special-purpose-addresses.js'
import { checkWebhookUrl, forbiddenAddressReason } from '../../src/webhooks/url-policy.js'

const BITS = { ipv4: 32, ipv6: 128 } as const

function toBigInt(address: string, family: 'ipv4' | 'ipv6'): bigint {
  const parts = family === 'ipv4' ? address.split('.').map(Number) : ipv6Groups(address)!
  const width = family === 'ipv4' ? 8n : 16n
  return parts.reduce((sum, part) => (sum << width) | BigInt(part), 0n)
}

function fromBigInt(value: bigint, family: 'ipv4' | 'ipv6'): string {
  const [count, width, base, sep] = family === 'ipv4' ? [4, 8n, 10, '.'] : [8, 16n, 16, ':']
  const mask = (1n << width) - 1n
  const parts: string[] = []
  for (let i = count - 1; i >= 0; i--) parts.push(((value >> (BigInt(i) * width)) & mask).toString(base))
  return parts.join(sep)
}

t.test('every block is refused from its first address to its last, naming it or a narrower one', async (t) => {
  SPECIAL_PURPOSE_BLOCKS.forEach((block, index) => {
    const size = 1n << BigInt(BITS[block.family] - block.prefix)
    const first = toBigInt(block.network, block.family)
    t.equal(first % size, 0n, `${block.network}/${block.prefix} is a network address`)
    t.match(block.rfc, /^(RFC \d+|cloud|Azure)$/, `${block.network}/${block.prefix} says where it comes from`)
    for (const edge of [first, first + 1n, first + size - 1n]) {
      if (edge >= first + size) continue
      const address = fromBigInt(edge, block.family)
      const found = specialPurposeBlock(address)
      const at = found === null ? -1 : SPECIAL_PURPOSE_BLOCKS.indexOf(found)
      t.ok(at === index || (at >= 0 && at < index), `${address} is in ${block.network}/${block.prefix}`)
      t.not(forbiddenAddressReason(address), null, `${address} is refused`)
    }
  })
})

t.test('the addresses just outside the blocks pass', async (t) => {
  for (const address of [
    '1.0.0.0',
    '9.255.255.255',
    '11.0.0.0',
    '100.63.255.255',
    '100.128.0.0',
    '126.255.255.255',
    '128.0.0.0',
    '168.63.129.15',
    '168.63.129.17',
    '169.253.255.255',
    '169.255.0.0',
    '172.15.255.255',
    '172.32.0.0',
    '191.255.255.255',
    '192.0.1.0',
    '192.0.1.255',
    '192.0.3.0',
    '192.88.98.255',
    '192.88.100.0',
    '192.167.255.255',
    '192.169.0.0',
    '198.17.255.255',
    '198.20.0.0',
    '198.51.99.255',
    '198.51.101.0',
    '203.0.112.255',
    '203.0.114.0',
    '223.255.255.255',
    '::1:0:0',
    '::fffe:ffff:ffff',
    '::1:0:0:0',
    '::fffe:ffff:ffff:ffff',
    '::ffff:1:0:0',
    '64:ff9b:2::',
    'ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff',
    '100:0:0:1::',
    '2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff',
    '2001:200::',
    '2001:db7:ffff:ffff:ffff:ffff:ffff:ffff',
    '2001:db9::',
    '3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff',
    '3fff:1000::',
    '5eff:ffff:ffff:ffff:ffff:ffff:ffff:ffff',
    '5f01::',
    'fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff',
    'fe00::',
    'fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff',
    '2001:4860:4860::8888',
    '::ffff:93.184.216.34',
  ]) {
    t.equal(specialPurposeBlock(address), null, `${address} is in no block`)
    t.equal(forbiddenAddressReason(address), null, `${address} passes`)
  }
})

t.test('the blocks of issue 28, each refused with what it is', async (t) => {
  const cases: [string, RegExp][] = [
    ['192.0.0.1', /IETF protocol assignment/],
    ['192.0.0.170', /IETF protocol assignment/],
    ['192.0.0.192', /IETF protocol assignment/],
    ['198.18.0.1', /benchmarking/],
    ['198.19.255.255', /benchmarking/],
    ['192.0.2.1', /TEST-NET-1/],
    ['198.51.100.7', /TEST-NET-2/],
    ['203.0.113.200', /TEST-NET-3/],
    ['192.88.99.1', /6to4 relay anycast/],
    ['240.0.0.1', /reserved/],
    ['255.255.255.254', /reserved/],
    ['255.255.255.255', /limited broadcast/],
    ['fec0::1', /site-local/],
    ['feff:ffff::1', /site-local/],
    ['::ffff:0:7f00:1', /IPv4-translated \(SIIT\)/],
    ['::ffff:0:5db8:d822', /IPv4-translated \(SIIT\)/],
    ['2001:db8::1', /documentation/],
    ['3fff::1', /documentation/],
    ['100::1', /discard-only/],
    ['2001:1::1', /IETF protocol assignment/],
    ['2001:2::1', /benchmarking/],
    ['2001:2:1::', /IETF protocol assignment/],
    ['2001:10::1', /ORCHID/],
    ['2001:1f::1', /deprecated ORCHID/],
    ['2001:20::1', /ORCHIDv2/],
    ['2001:1ff:ffff::', /IETF protocol assignment/],
    ['5f00::1', /SRv6/],
    ['168.63.129.16', /Azure host/],
    ['169.254.169.254', /cloud metadata/],
    ['fd00:ec2::254', /cloud metadata/],
  ]
  for (const [address, what] of cases) {
    t.match(forbiddenAddressReason(address), what, address)
    await t.rejects(
      checkWebhookUrl(`https://${address.includes(':') ? `[${address}]` : address}/`),
      { name: 'WebhookUrlError', message: what },
      address,
    )
  }
})

t.test('IPv4-mapped, NAT64 and 6to4 are judged as the IPv4 address inside, for the new blocks too', async (t) => {
  const cases: [string, RegExp][] = [
    ['::ffff:198.18.0.1', /^::ffff:198\.18\.0\.1 is an IPv4-mapped address of 198\.18\.0\.1, a benchmarking address$/],
    ['::ffff:c000:201', /IPv4-mapped address of 192\.0\.2\.1, a documentation/],
    ['64:ff9b::c000:201', /NAT64 address of 192\.0\.2\.1, a documentation/],
    ['64:ff9b::a83f:8110', /NAT64 address of 168\.63\.129\.16, the Azure host/],
    ['2002:c612:1::', /6to4 address of 198\.18\.0\.1, a benchmarking/],
    ['2002:c000:1::', /6to4 address of 192\.0\.0\.1, an IETF protocol assignment/],
  ]
  for (const [address, reason] of cases) t.match(forbiddenAddressReason(address), reason, address)
})
