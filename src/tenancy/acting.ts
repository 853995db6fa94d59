// The acting-tenant rules of docs/api.md as plain functions over a lookup interface, so that they
// can be tested without a server and cached behind without change.
import { ApiError } from '../errors.js'
import type { Principal } from '../auth/principal.js'
import type { TenancyLookups, TenantRecord } from '../shared/tenancy-records.js'
import { isExternalId, isUuid } from '../shared/identifiers.js'

export type ActingTarget =
  | { kind: 'absent' }
  | { kind: 'self' }
  | { kind: 'id'; id: string }
  | { kind: 'ext'; externalId: string }

const WRITE_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])
const LOWER_CASE = /[a-z]/

export function isWriteMethod(method: string): boolean {
  // Node's parser gives methods in upper case: no copy for those (every proxied request asks).
  if (WRITE_METHODS.has(method)) return true
  return LOWER_CASE.test(method) && WRITE_METHODS.has(method.toUpperCase())
}

function malformed(detail: string): ApiError {
  return new ApiError('acting_tenant_malformed', detail)
}

/**
 * Parses the header. `occurrences` is how many times the client sent it: Node joins repeated
 * headers with ", ", but the raw count also catches a repeat whose value was empty.
 */
export function parseActingHeader(
  value: string | string[] | undefined,
  occurrences = value === undefined ? 0 : 1,
): ActingTarget {
  if (value === undefined && occurrences === 0) return { kind: 'absent' }
  if (Array.isArray(value) || occurrences > 1) throw malformed('X-Service-Acting-Tenant must be sent once')
  if (value === undefined || value === '') throw malformed('X-Service-Acting-Tenant is empty')
  if (value.includes(',')) throw malformed('X-Service-Acting-Tenant must hold one value')
  if (value === 'self') return { kind: 'self' }
  if (isUuid(value)) return { kind: 'id', id: value.toLowerCase() }
  if (value.startsWith('ext:')) {
    const externalId = value.slice(4)
    if (isExternalId(externalId)) return { kind: 'ext', externalId }
    throw malformed('X-Service-Acting-Tenant has an external_id that cannot exist')
  }
  throw malformed(`X-Service-Acting-Tenant must be self, a tenant UUID or ext:<external_id>${didYouMean(value)}`)
}

/**
 * What the sender most likely meant, when it is a value the header takes: `self` and the `ext:`
 * prefix in another case (`SELF`, `EXT:acme-eu`), or an external_id sent bare (`acme-eu`).
 */
function didYouMean(value: string): string {
  if (value.toLowerCase() === 'self') return '; self is lower-case: send self'
  if (value.slice(0, 4).toLowerCase() === 'ext:' && isExternalId(value.slice(4)))
    return `; the ext: prefix is lower-case: send ext:${value.slice(4)}`
  if (isExternalId(value)) return `; to act as the sub-account whose external_id is ${value}, send ext:${value}`
  return ''
}

/** Returns the tenant the request acts as, or throws the first rule it breaks. */
export async function resolveActingTenant(
  principal: Principal,
  target: ActingTarget,
  method: string,
  lookups: TenancyLookups,
): Promise<TenantRecord> {
  const own = principal.tenant
  const isParentKey = own.parentId === null

  if (target.kind === 'absent') {
    // Only a parent can own sub-accounts, so a sub-account key never needs the header.
    if (isParentKey && isWriteMethod(method) && (await lookups.hasActiveSubAccounts(own.id))) {
      throw new ApiError(
        'acting_tenant_required',
        'this account has active sub-accounts: a write must name its tenant in X-Service-Acting-Tenant (self for the parent)',
      )
    }
    return own
  }
  if (target.kind === 'self') return own

  if (!isParentKey) {
    // A sub-account may name itself by any of its names; a parent names itself only as `self`,
    // for its own UUID is no sub-account of it (docs/api.md, the acting header).
    if (target.kind === 'id' && target.id === own.id) return own
    if (target.kind === 'ext' && own.externalId !== null && target.externalId === own.externalId) return own
    throw new ApiError('acting_tenant_forbidden', 'a sub-account key may act only as its own account')
  }

  const targetId = target.kind === 'id' ? target.id : await lookups.subAccountIdByExternalId(own.id, target.externalId)
  // Unknown and another parent's sub-account get the same answer, so tenant ids cannot be probed;
  // asked by parent, they also take the same way through the caches, so timing tells them apart no
  // better (docs/decisions/0030-not-yours-and-no-such-take-the-same-time-too.md).
  const tenant = targetId === null ? null : await lookups.subAccount(own.id, targetId)
  if (tenant === null || tenant.parentId !== own.id) {
    throw new ApiError('acting_tenant_forbidden', 'the acting tenant is not a sub-account of this account')
  }
  if (tenant.status !== 'active') {
    throw new ApiError('acting_tenant_deactivated', 'the acting tenant is deactivated')
  }
  return tenant
}
