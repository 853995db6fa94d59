// Where a key may be used from (docs/api.md, IP allow-lists): the address must be within the
// key's own allow-list and its sub-account's key policy's, each where one is set. Read from the
// records the admission already holds: no store round trip.
import { ApiError } from '../errors.js'
import type { KeyRecord, TenantRecord } from '../tenancy/lookups.js'
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
