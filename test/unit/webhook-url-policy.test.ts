// Webhook URLs (src/webhooks/url-policy.ts): https only, no credentials, and no host that is or
// resolves to a loopback, private, link-local, CGNAT, multicast, broadcast or metadata address,
// however the address is spelled. Names go through an injected resolver, never external DNS.
import type { LookupOptions } from 'node:dns'
import t, { type Test } from 'tap'
import { checkedLookup } from '../../src/webhooks/deliver.js'
import {
  checkWebhookUrl,
  forbiddenAddressReason,
  type LookupAll,
  WebhookUrlError,
} from '../../src/webhooks/url-policy.js'

const PUBLIC_V4 = '93.184.216.34'
const PUBLIC_V6 = '2606:2800:220:1:248:1893:25c8:1946'

/** A resolver that knows only `names`; anything else does not resolve. */
function resolver(names: Record<string, string[]>): LookupAll {
  return async (hostname) => {
    const addresses = names[hostname]
    if (addresses === undefined) throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' })
    return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }))
  }
}

const lookup = resolver({
  'hooks.example.com': [PUBLIC_V4, PUBLIC_V6],
  'loopback.example.com': ['127.0.0.1'],
  'private.example.com': ['10.1.2.3'],
  'metadata.example.com': ['169.254.169.254'],
  'v6loopback.example.com': ['::1'],
  'mixed.example.com': [PUBLIC_V4, '192.168.1.1'],
  'mapped.example.com': ['::ffff:10.0.0.1'],
})

async function refused(t: Test, url: string, reason: RegExp) {
  await t.rejects(checkWebhookUrl(url, { lookup }), { name: 'WebhookUrlError', message: reason }, url)
}

t.test('public https URLs pass, by address or by name', async (t) => {
  for (const url of [
    `https://${PUBLIC_V4}/hook`,
    `https://[${PUBLIC_V6}]/hook`,
    'https://hooks.example.com:8443/x?y=1',
  ]) {
    const parsed = await checkWebhookUrl(url, { lookup })
    t.equal(parsed.href, new URL(url).href, url)
  }
})

t.test('https only, no user or password, an absolute URL', async (t) => {
  await refused(t, 'http://hooks.example.com/', /must use https$/)
  await refused(t, 'ftp://hooks.example.com/', /must use https$/)
  await refused(t, 'https://user:pass@hooks.example.com/', /user or password/)
  await refused(t, 'https://user@hooks.example.com/', /user or password/)
  await refused(t, '/relative', /not a valid absolute URL/)
})

t.test('forbidden literal addresses, each range', async (t) => {
  const cases: [string, RegExp][] = [
    ['https://127.0.0.1/', /loopback/],
    ['https://127.255.1.2/', /loopback/],
    ['https://0.0.0.0/', /unspecified/],
    ['https://10.0.0.1/', /private/],
    ['https://172.16.0.1/', /private/],
    ['https://172.31.255.255/', /private/],
    ['https://192.168.0.1/', /private/],
    ['https://169.254.1.1/', /link-local/],
    ['https://100.64.0.1/', /CGNAT/],
    ['https://100.127.255.254/', /CGNAT/],
    ['https://224.0.0.1/', /multicast/],
    ['https://255.255.255.255/', /broadcast/],
    ['https://169.254.169.254/latest/meta-data/', /metadata/],
    ['https://[::1]/', /loopback/],
    ['https://[::]/', /unspecified/],
    ['https://[fc00::1]/', /unique local/],
    ['https://[fd12:3456::1]/', /unique local/],
    ['https://[fe80::1]/', /link-local/],
    ['https://[ff02::1]/', /multicast/],
    ['https://[fd00:ec2::254]/', /metadata/],
  ]
  for (const [url, reason] of cases) await refused(t, url, reason)
})

t.test('odd spellings of forbidden addresses, as WHATWG URL normalises them', async (t) => {
  const cases: [string, RegExp][] = [
    ['https://2130706433/', /127\.0\.0\.1 is a loopback/],
    ['https://0x7f.1/', /127\.0\.0\.1 is a loopback/],
    ['https://017700000001/', /127\.0\.0\.1 is a loopback/],
    ['https://127.1/', /127\.0\.0\.1 is a loopback/],
    ['https://0xa9fea9fe/', /169\.254\.169\.254 is a cloud metadata/],
    ['https://[::ffff:127.0.0.1]/', /loopback/],
    ['https://[::ffff:7f00:1]/', /loopback/],
    ['https://[::ffff:10.0.0.1]/', /private/],
    ['https://[::ffff:169.254.169.254]/', /metadata/],
    ['https://[::127.0.0.1]/', /IPv4-compatible/],
    ['https://[0:0:0:0:0:0:0:1]/', /loopback/],
  ]
  for (const [url, reason] of cases) await refused(t, url, reason)
})

t.test(
  'NAT64 and 6to4 addresses are judged as the IPv4 address inside; local-use NAT64 and Teredo refused',
  async (t) => {
    const cases: [string, RegExp][] = [
      ['64:ff9b::7f00:1', /64:ff9b::7f00:1 is a NAT64 address of 127\.0\.0\.1, a loopback address$/],
      ['64:ff9b::127.0.0.1', /NAT64 address of 127\.0\.0\.1, a loopback/],
      ['64:ff9b::a00:1', /NAT64 address of 10\.0\.0\.1, a private/],
      ['64:ff9b::a9fe:a9fe', /NAT64 address of 169\.254\.169\.254, a cloud metadata/],
      ['64:ff9b::c0a8:101', /NAT64 address of 192\.168\.1\.1, a private/],
      ['64:ff9b::', /NAT64 address of 0\.0\.0\.0, an unspecified/],
      ['2002:7f00:1::', /2002:7f00:1:: is a 6to4 address of 127\.0\.0\.1, a loopback address$/],
      ['2002:a9fe:a9fe::1', /6to4 address of 169\.254\.169\.254, a cloud metadata/],
      ['2002:a00:1:ffff::1', /6to4 address of 10\.0\.0\.1, a private/],
      ['2002:6440:1::', /6to4 address of 100\.64\.0\.1, a shared/],
      ['64:ff9b:1::5db8:d822', /local-use NAT64/],
      ['64:ff9b:1:ffff::1', /local-use NAT64/],
      ['2001:0:4136:e378:8000:63bf:3fff:fdd2', /Teredo/],
      ['2001::1', /Teredo/],
    ]
    for (const [address, reason] of cases) {
      t.match(forbiddenAddressReason(address), reason, address)
      await refused(t, `https://[${address}]/`, reason)
    }
    for (const address of ['64:ff9b::5db8:d822', '64:ff9b::93.184.216.34', '2002:5db8:d822::1', '2606:4700::1111']) {
      t.equal(forbiddenAddressReason(address), null, `${address}: a public address inside (or none) passes`)
    }
    // Not the well-known /96: the bits between are not zero, so it is no NAT64 address of 127.0.0.1.
    t.equal(forbiddenAddressReason('64:ff9b:0:0:1::7f00:1'), null)
    const nat64 = resolver({ 'nat64.example.com': ['64:ff9b::a00:1'], 'sixto4.example.com': ['2002:c0a8:101::'] })
    await t.rejects(checkWebhookUrl('https://nat64.example.com/', { lookup: nat64 }), {
      message: /resolves to an address that is not allowed$/,
    })
    await t.rejects(checkWebhookUrl('https://sixto4.example.com/', { lookup: nat64 }), {
      message: /resolves to an address that is not allowed$/,
    })
  },
)

t.test('names are resolved, and refused if ANY address is forbidden', async (t) => {
  await refused(
    t,
    'https://loopback.example.com/',
    /^url host loopback\.example\.com resolves to an address that is not allowed$/,
  )
  await refused(
    t,
    'https://private.example.com/',
    /^url host private\.example\.com resolves to an address that is not allowed$/,
  )
  await refused(
    t,
    'https://metadata.example.com/',
    /^url host metadata\.example\.com resolves to an address that is not allowed$/,
  )
  await refused(
    t,
    'https://v6loopback.example.com/',
    /^url host v6loopback\.example\.com resolves to an address that is not allowed$/,
  )
  await refused(
    t,
    'https://mixed.example.com/',
    /^url host mixed\.example\.com resolves to an address that is not allowed$/,
  )
  await refused(
    t,
    'https://mapped.example.com/',
    /^url host mapped\.example\.com resolves to an address that is not allowed$/,
  )
  await refused(t, 'https://nowhere.example.com/', /does not resolve \(ENOTFOUND\)/)
  await refused(t, 'https://metadata.google.internal/', /metadata name/)
  await refused(t, 'https://METADATA.google.internal./', /metadata name/)
  await refused(t, 'https://localhost/', /loopback/)
  await refused(t, 'https://app.localhost/', /loopback/)
  const none: LookupAll = async () => []
  await t.rejects(checkWebhookUrl('https://empty.example.com/', { lookup: none }), /does not resolve$/)
})

t.test('the default resolver is node:dns: localhost resolves to loopback and is refused', async (t) => {
  // `localhost.` with a trailing dot skips the name rule and reaches the resolver.
  const err = await checkWebhookUrl('https://localhost./').catch((e: unknown) => e)
  t.type(err, WebhookUrlError)
  t.match((err as Error).message, /loopback/)
})

t.test('allowInsecure lifts both the https rule and the address rule, not the user rule', async (t) => {
  const options = { allowInsecure: true, lookup }
  for (const url of [
    'http://127.0.0.1:8080/',
    'http://loopback.example.com/',
    'https://169.254.169.254/',
    'http://[::1]/',
  ]) {
    t.ok(await checkWebhookUrl(url, options), url)
  }
  await t.rejects(checkWebhookUrl('ftp://x/', options), /must use https or http/)
  await t.rejects(checkWebhookUrl('http://u:p@127.0.0.1/', options), /user or password/)
})

t.test('a refusal says WEBHOOKS_ALLOW_INSECURE would lift it only when it would', async (t) => {
  const wouldLift = (url: string, allowInsecure: boolean) =>
    checkWebhookUrl(url, { allowInsecure, lookup }).then(
      () => 'accepted',
      (err: WebhookUrlError) => err.insecureWouldAllow,
    )
  t.equal(await wouldLift('http://hooks.example.com/', false), true, 'http, without the setting')
  t.equal(await wouldLift('https://127.0.0.1/', false), true, 'loopback, without the setting')
  t.equal(await wouldLift('ftp://hooks.example.com/', false), false, 'ftp: never allowed')
  t.equal(await wouldLift('ftp://hooks.example.com/', true), false, 'ftp, with the setting already on')
  t.equal(await wouldLift('https://u:p@hooks.example.com/', false), false, 'credentials: never allowed')
  t.equal(await wouldLift('http://u:p@hooks.example.com/', false), false, 'http with credentials: never allowed')
})

t.test('forbiddenAddressReason on its own', async (t) => {
  t.equal(forbiddenAddressReason(PUBLIC_V4), null)
  t.equal(forbiddenAddressReason(PUBLIC_V6), null)
  t.equal(forbiddenAddressReason('100.128.0.1'), null, 'just past CGNAT')
  t.equal(forbiddenAddressReason('172.32.0.1'), null, 'just past 172.16/12')
  t.match(forbiddenAddressReason('not-an-ip'), /not an IP address/)
})

t.test("the delivery's lookup answers as net asks: all addresses, or one of a family", async (t) => {
  const checked = checkedLookup(lookup)
  const ask = (hostname: string, options: LookupOptions) =>
    new Promise<unknown[]>((resolve) => checked(hostname, options, (...args: unknown[]) => resolve(args)))
  t.same(await ask('hooks.example.com', { all: true }), [
    null,
    [
      { address: PUBLIC_V4, family: 4 },
      { address: PUBLIC_V6, family: 6 },
    ],
  ])
  t.same(await ask('hooks.example.com', { family: 6 }), [null, PUBLIC_V6, 6])
  t.same(await ask('hooks.example.com', {}), [null, PUBLIC_V4, 4])
  const [err] = await ask('mixed.example.com', {})
  t.match(err, { name: 'WebhookUrlError', message: /resolves to an address that is not allowed$/ })
  t.notMatch((err as Error).message, /192\.168\.1\.1/, 'the address is not named')
  const v4only = checkedLookup(async () => [{ address: PUBLIC_V4, family: 4 }])
  const [none] = await new Promise<unknown[]>((resolve) =>
    v4only('hooks.example.com', { family: 6 }, (...args: unknown[]) => resolve(args)),
  )
  t.match(none, { code: 'ENOTFOUND' })
})
