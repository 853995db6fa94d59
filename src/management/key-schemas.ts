// TypeBox schemas of what a key may be (docs/api.md, API keys; Key policies and IP allow-lists):
// its scopes, its IP allow-list, and a sub-account's key policy. Allow-list entries are checked
// by guardrails/ip-allowlist.ts.
import { Type } from 'typebox'
import { SCOPE_PATTERN } from '../auth/scopes.js'

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) => Type.Union([schema, Type.Null()])

export const Scope = Type.String({ pattern: SCOPE_PATTERN, maxLength: 100 })

const MAX_ALLOWLIST_ENTRIES = 100
const Cidr = Type.String({ minLength: 1, maxLength: 50, description: 'an IPv4 or IPv6 address or CIDR' })
export const IpAllowlist = Type.Array(Cidr, { minItems: 1, maxItems: MAX_ALLOWLIST_ENTRIES })
const KeyPolicyMembers = {
  allowed_scopes: Nullable(
    Type.Array(Scope, { minItems: 1, maxItems: 50, description: 'scopes or patterns (`orders:*`) its keys may have' }),
  ),
  max_ttl_seconds: Nullable(
    Type.Integer({
      minimum: 60,
      maximum: 10 * 366 * 86_400,
      description: 'its keys must have an `expires_at` at most this far ahead',
    }),
  ),
  ip_allowlist: Nullable(Type.Array(Cidr, { minItems: 1, maxItems: MAX_ALLOWLIST_ENTRIES })),
}
/** As shown: every member, null where none is set. */
export const KeyPolicy = Type.Object(KeyPolicyMembers, { additionalProperties: false })
/** In a body: replaces the whole policy; a member left out is null. */
export const KeyPolicyBody = Type.Object(
  {
    allowed_scopes: Type.Optional(KeyPolicyMembers.allowed_scopes),
    max_ttl_seconds: Type.Optional(KeyPolicyMembers.max_ttl_seconds),
    ip_allowlist: Type.Optional(KeyPolicyMembers.ip_allowlist),
  },
  { additionalProperties: false },
)
