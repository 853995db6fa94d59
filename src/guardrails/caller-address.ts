// Who the caller is and where a key may be used from (docs/api.md, IP allow-lists). The address
// is the peer's, or behind TRUSTED_PROXIES the right-most X-Forwarded-For address not among them
// (proxy-addr, as fastify's request.ip); an entry that is not an address is read as absent, so
// that what the allow-lists, the request log and events take for the client is always one
// (docs/api.md#key-policies-and-ip-allow-lists). The address must be within the key's own
// allow-list and its sub-account's key policy's, each where one is set, read from the records the
// admission already holds.
import type { IncomingMessage } from 'node:http'
import { isIP } from 'node:net'
import { ApiError } from '../errors.js'
import type { KeyRecord, TenantRecord } from '../shared/tenancy-records.js'
import { allowsAddress } from './ip-allowlist.js'

/** Why `ip` may not use the key (`key` of the allow-list's owner, `sub-account` of a policy's), or null. */
export function addressRefusedBy(key: KeyRecord, tenant: TenantRecord, ip: string): 'key' | 'sub-account' | null {
  const own = key.ipAllowlist
  if (own != null && !allowsAddress(own, ip)) return 'key'
  const policy = tenant.keyIpAllowlist
  if (policy != null && !allowsAddress(policy, ip)) return 'sub-account'
  return null
}

/** The 403 for a key used from an address outside its allow-lists; undefined when it may be used. */
export function ipRefusal(key: KeyRecord, tenant: TenantRecord, ip: string): ApiError | undefined {
  const refusedBy = addressRefusedBy(key, tenant, ip)
  if (refusedBy === null) return undefined
  const list = refusedBy === 'key' ? "the key's ip_allowlist" : "its sub-account's key_policy.ip_allowlist"
  return new ApiError('ip_not_allowed', `requests from ${ip} may not use this key: the address is not in ${list}`)
}

/**
 * An X-Forwarded-For entry that is an address: an IPv4 dotted quad or an IPv6 address without a
 * zone. Stricter than proxy-addr, which takes `1` or `0x7f.1` for addresses.
 */
function isAddress(entry: string): boolean {
  return isIP(entry) !== 0 && entry.indexOf('%') === -1
}

/**
 * X-Forwarded-For without its entries that are not addresses (`<script>`, `unknown`, `host:port`,
 * an empty one): '' when none is left, the same string when every entry is an address.
 */
export function forwardedAddresses(header: string): string {
  for (let start = 0; ; ) {
    const comma = header.indexOf(',', start)
    const end = comma === -1 ? header.length : comma
    if (!isAddress(header.slice(start, end).trim())) break
    if (comma === -1) return header
    start = comma + 1
  }
  return header
    .split(',')
    .map((entry) => entry.trim())
    .filter(isAddress)
    .join(', ')
}

/**
 * An onRequest hook, first of all, behind TRUSTED_PROXIES: the request's X-Forwarded-For keeps its
 * addresses only, so that request.ip, which proxy-addr reads from it for every route and which
 * returns the left-most entry unchecked when every hop right of it is trusted, is an address. The
 * upstream gets the same chain (proxy/headers.ts), with the peer appended.
 */
export function keepForwardedAddresses(request: { raw: IncomingMessage }, _reply: unknown, done: () => void): void {
  const headers = request.raw.headers
  const forwardedFor = headers['x-forwarded-for']
  // Node joins repeated X-Forwarded-For lines into one string.
  if (typeof forwardedFor === 'string') {
    const kept = forwardedAddresses(forwardedFor)
    if (kept !== forwardedFor) headers['x-forwarded-for'] = kept
  }
  done()
}
