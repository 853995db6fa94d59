// Where a webhook may be sent
// (docs/decisions/0127-webhook-urls-https-no-credentials-public-addresses.md): https only, no
// credentials in the URL, and never to a special-purpose address (special-purpose-addresses.ts:
// IANA's registries and the cloud hosts' addresses); IPv4-mapped, NAT64 and 6to4 addresses are
// judged as the IPv4 address inside (embedded-ipv4.ts); the odd IPv4 spellings (2130706433, 0x7f.1,
// 127.1) are normalised by WHATWG URL before we see them. The same function judges a URL at
// registration and the address connected to at each delivery (deliver.ts).
import { Resolver } from 'node:dns/promises'
import { isIP } from 'node:net'
import { embeddedIpv4 } from './embedded-ipv4.js'
import { specialPurposeBlock } from './special-purpose-addresses.js'

/** Every address a name resolves to, as node:dns `lookup(name, {all: true})` answers. */
export type LookupAll = (hostname: string) => Promise<readonly { address: string; family: number }[]>

export interface UrlPolicyOptions {
  /** WEBHOOKS_ALLOW_INSECURE: http and any address (development, tests). */
  readonly allowInsecure?: boolean
  /** Resolves names; `resolverLookup()` by default (tests inject their own). */
  readonly lookup?: LookupAll
  /** How long a name may take to resolve before the URL is refused (default: no bound of its own). */
  readonly lookupTimeoutMs?: number
}

/** A webhook URL the policy refuses; the message is one line, fit for a 400 validation_failed. */
export class WebhookUrlError extends Error {
  /**
   * WEBHOOKS_ALLOW_INSECURE would accept it: an http URL, or a host that is local or not
   * public. Not a name that does not resolve: the setting would take a typo for a host.
   */
  readonly insecureWouldAllow
  constructor(message: string, insecureWouldAllow = false) {
    super(message)
    this.insecureWouldAllow = insecureWouldAllow
    this.name = 'WebhookUrlError'
  }
}

/** How long one query to one nameserver waits for its answer, and how many times it is sent. */
export const NAME_QUERY_TIMEOUT_MS = 500
export const NAME_QUERY_TRIES = 2

/**
 * Resolves a name's A and AAAA records with node:dns's `Resolver` (c-ares, on the event loop), not
 * `dns.lookup`: getaddrinfo runs on libuv's thread pool, which runs at most two lookups at once
 * and cannot stop one, so a parent naming hosts whose nameserver never answers held every lookup of
 * the replica (its upstreams', Postgres's, Redis's) for 10 s a name. These queries end on their own
 * after their tries. They read /etc/resolv.conf, not /etc/hosts
 * (docs/decisions/0131-a-webhooks-name-is-resolved-by-c-ares.md).
 * `servers`: the nameservers to ask instead of the system's (tests).
 */
export function resolverLookup(servers?: readonly string[]): LookupAll {
  return async (hostname) => {
    const resolver = new Resolver({ timeout: NAME_QUERY_TIMEOUT_MS, tries: NAME_QUERY_TRIES })
    if (servers !== undefined) resolver.setServers(servers)
    const records = (query: Promise<string[]>, family: 4 | 6) =>
      query.then(
        (addresses) => addresses.map((address) => ({ address, family })),
        (err: NodeJS.ErrnoException) => err,
      )
    const [v4, v6] = await Promise.all([
      records(resolver.resolve4(hostname), 4),
      records(resolver.resolve6(hostname), 6),
    ])
    // A name with only one family answers the other with ENODATA: what it has is its addresses.
    if (v4 instanceof Error && v6 instanceof Error) throw v4
    return [...(v4 instanceof Error ? [] : v4), ...(v6 instanceof Error ? [] : v6)]
  }
}

export const defaultLookup: LookupAll = resolverLookup()

const METADATA_NAMES = ['metadata.google.internal', 'metadata']

/** Why `address` (an IP literal) must not be sent to, or null when it may. */
export function forbiddenAddressReason(address: string): string | null {
  const family = isIP(address)
  if (family === 0) return `${address} is not an IP address`
  const block = specialPurposeBlock(address)
  if (block !== null) return `${address} is ${block.what}`
  const embedded = family === 6 ? embeddedIpv4(address) : null
  const inner = embedded === null ? null : forbiddenAddressReason(embedded.ipv4)
  if (inner !== null) {
    const article = embedded!.kind === 'IPv4-mapped' ? 'an' : 'a'
    return `${address} is ${article} ${embedded!.kind} address of ${inner.replace(' is ', ', ')}`
  }
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
    throw new WebhookUrlError(
      `url must use ${allowed.map((p) => p.slice(0, -1)).join(' or ')}`,
      // WEBHOOKS_ALLOW_INSECURE lets http through, never another scheme nor credentials.
      url.protocol === 'http:' && !options.allowInsecure && url.username === '' && url.password === '',
    )
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
    if (reason !== null) throw new WebhookUrlError(`url host ${reason}`, true)
    return url
  }
  await checkName(host.name, options.lookup ?? defaultLookup, options.lookupTimeoutMs)
  return url
}

/** `lookup(name)`, or a refusal once `timeoutMs` has passed (the lookup ends on its own, later). */
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
  if (METADATA_NAMES.includes(lower)) throw new WebhookUrlError(`url host ${name} is a cloud metadata name`, true)
  if (lower === 'localhost' || lower.endsWith('.localhost'))
    throw new WebhookUrlError(`url host ${name} is loopback`, true)
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
    if (reason !== null) throw new WebhookUrlError(`url host ${name} resolves to an address that is not allowed`, true)
  }
  return addresses
}
