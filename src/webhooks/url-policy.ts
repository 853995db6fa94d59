// Where a webhook may be sent (docs/decisions.md, webhook URLs): https only, no credentials in the
// URL, and never to an address inside the deployment's network. The addresses are checked with
// node:net's BlockList, which also matches IPv4-mapped IPv6 addresses against the IPv4 rules; NAT64
// and 6to4 addresses are judged as the IPv4 address inside (embedded-ipv4.ts); the odd IPv4
// spellings (2130706433, 0x7f.1, 127.1) are normalised by WHATWG URL before we see them.
import { lookup as dnsLookup } from 'node:dns/promises'
import { BlockList, isIP } from 'node:net'
import { embeddedIpv4 } from './embedded-ipv4.js'

/** Every address a name resolves to, as node:dns `lookup(name, {all: true})` answers. */
export type LookupAll = (hostname: string) => Promise<readonly { address: string; family: number }[]>

export interface UrlPolicyOptions {
  /** WEBHOOKS_ALLOW_INSECURE: http and any address (development, tests). */
  readonly allowInsecure?: boolean
  /** Resolves names; node:dns lookup by default (tests inject their own). */
  readonly lookup?: LookupAll
  /** How long a name may take to resolve before the URL is refused (default: no bound of its own). */
  readonly lookupTimeoutMs?: number
}

/** A webhook URL the policy refuses; the message is one line, fit for a 400 validation_failed. */
export class WebhookUrlError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'WebhookUrlError'
  }
}

export const defaultLookup: LookupAll = (hostname) => dnsLookup(hostname, { all: true, verbatim: true })

const RANGES: readonly (readonly [string, number, 'ipv4' | 'ipv6', string])[] = [
  ['0.0.0.0', 8, 'ipv4', 'an unspecified address'],
  ['10.0.0.0', 8, 'ipv4', 'a private address'],
  ['100.64.0.0', 10, 'ipv4', 'a shared (CGNAT) address'],
  ['127.0.0.0', 8, 'ipv4', 'a loopback address'],
  ['169.254.0.0', 16, 'ipv4', 'a link-local address'],
  ['172.16.0.0', 12, 'ipv4', 'a private address'],
  ['192.168.0.0', 16, 'ipv4', 'a private address'],
  ['224.0.0.0', 4, 'ipv4', 'a multicast address'],
  // Reserved; holds the limited broadcast 255.255.255.255.
  ['240.0.0.0', 4, 'ipv4', 'a reserved or broadcast address'],
  // ::/96 holds :: and ::1 and the deprecated IPv4-compatible forms (::127.0.0.1), which the
  // IPv4 rules do not match.
  ['::', 96, 'ipv6', 'an unspecified, loopback or IPv4-compatible address'],
  ['fc00::', 7, 'ipv6', 'a private (unique local) address'],
  ['fe80::', 10, 'ipv6', 'a link-local address'],
  ['ff00::', 8, 'ipv6', 'a multicast address'],
  // Local-use NAT64 (RFC 8215): its translator and the IPv4 addresses it reaches are the
  // deployment's own choice, nothing to judge from outside.
  ['64:ff9b:1::', 48, 'ipv6', 'a local-use NAT64 address'],
  // Teredo: a tunnel through a relay, to an address (obfuscated in the last 32 bits) behind a NAT.
  ['2001::', 32, 'ipv6', 'a Teredo address'],
]

const METADATA_ADDRESSES = ['169.254.169.254', 'fd00:ec2::254']
const METADATA_NAMES = ['metadata.google.internal', 'metadata']

const metadata = new BlockList()
for (const address of METADATA_ADDRESSES) metadata.addAddress(address, isIP(address) === 6 ? 'ipv6' : 'ipv4')
const ranges = RANGES.map(([network, prefix, type, reason]) => {
  const list = new BlockList()
  list.addSubnet(network, prefix, type)
  return { list, reason }
})

/** Why `address` (an IP literal) must not be sent to, or null when it may. */
export function forbiddenAddressReason(address: string): string | null {
  const family = isIP(address)
  if (family === 0) return `${address} is not an IP address`
  const type = family === 6 ? 'ipv6' : 'ipv4'
  if (metadata.check(address, type)) return `${address} is a cloud metadata address`
  for (const { list, reason } of ranges) if (list.check(address, type)) return `${address} is ${reason}`
  const embedded = family === 6 ? embeddedIpv4(address) : null
  const inner = embedded === null ? null : forbiddenAddressReason(embedded.ipv4)
  if (inner !== null) return `${address} is a ${embedded!.kind} address of ${inner.replace(' is ', ', ')}`
  return null
}

/** The URL's host as an IP literal (brackets dropped) or a name (a trailing dot dropped). */
export function hostOf(url: URL): { literal: string } | { name: string } {
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname
  return isIP(host) === 0 ? { name: host.replace(/\.$/, '') } : { literal: host }
}

/** The checks that need no resolver: a URL, https, no credentials. */
export function parseWebhookUrl(raw: string, options: UrlPolicyOptions = {}): URL {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new WebhookUrlError('url is not a valid absolute URL')
  }
  const allowed = options.allowInsecure ? ['https:', 'http:'] : ['https:']
  if (!allowed.includes(url.protocol))
    throw new WebhookUrlError(`url must use ${allowed.map((p) => p.slice(0, -1)).join(' or ')}`)
  if (url.username !== '' || url.password !== '') throw new WebhookUrlError('url must not carry a user or password')
  return url
}

/**
 * Checks a webhook URL when an endpoint is created: the rules of parseWebhookUrl, then the host: a
 * literal address, or every address its name resolves to, must be public. Returns the parsed URL.
 */
export async function checkWebhookUrl(raw: string, options: UrlPolicyOptions = {}): Promise<URL> {
  const url = parseWebhookUrl(raw, options)
  if (options.allowInsecure) return url
  const host = hostOf(url)
  if ('literal' in host) {
    const reason = forbiddenAddressReason(host.literal)
    if (reason !== null) throw new WebhookUrlError(`url host ${reason}`)
    return url
  }
  await checkName(host.name, options.lookup ?? defaultLookup, options.lookupTimeoutMs)
  return url
}

/** `lookup(name)`, or a refusal once `timeoutMs` has passed (the lookup itself cannot be stopped). */
async function boundedLookup(lookup: LookupAll, name: string, timeoutMs: number | undefined) {
  if (timeoutMs === undefined) return lookup(name)
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new WebhookUrlError(`url host ${name} did not resolve within ${timeoutMs} ms`)),
      timeoutMs,
    )
  })
  try {
    return await Promise.race([lookup(name), late])
  } finally {
    clearTimeout(timer)
  }
}

/**
 * Resolves `name` and refuses it if it resolves to nothing, not within `timeoutMs`, or to ANY
 * forbidden address.
 */
export async function checkName(
  name: string,
  lookup: LookupAll,
  timeoutMs?: number,
): Promise<readonly { address: string; family: number }[]> {
  const lower = name.toLowerCase()
  if (METADATA_NAMES.includes(lower)) throw new WebhookUrlError(`url host ${name} is a cloud metadata name`)
  if (lower === 'localhost' || lower.endsWith('.localhost')) throw new WebhookUrlError(`url host ${name} is loopback`)
  let addresses: readonly { address: string; family: number }[]
  try {
    addresses = await boundedLookup(lookup, name, timeoutMs)
  } catch (err) {
    if (err instanceof WebhookUrlError) throw err
    throw new WebhookUrlError(`url host ${name} does not resolve (${(err as NodeJS.ErrnoException).code ?? 'error'})`)
  }
  if (addresses.length === 0) throw new WebhookUrlError(`url host ${name} does not resolve`)
  for (const { address } of addresses) {
    const reason = forbiddenAddressReason(address)
    // Never say which address: a refusal that names it lets a parent map internal names.
    if (reason !== null) throw new WebhookUrlError(`url host ${name} resolves to an address that is not public`)
  }
  return addresses
}
