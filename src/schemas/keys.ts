// TypeBox schemas of API keys (docs/api.md, API keys; Key policies and IP allow-lists): what a key
// may be (its scopes, its IP allow-list, a sub-account's key policy), a key as shown and as minted,
// its path, and the mint and roll bodies. Allow-list entries are checked by
// guardrails/ip-allowlist.ts. The response schemas are the serializers too: the secrets leave only
// through MintedApiKey.
import { Type, type Static } from 'typebox'
import { Name, Nullable, Page, Timestamp } from './common.js'
import { DEFAULT_ROLL_OVERLAP_SECONDS, MAX_EXPIRY_YEARS, MAX_ROLL_OVERLAP_SECONDS } from '../shared/key-expiry.js'
import { SCOPE_PATTERN } from '../shared/scopes.js'

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

const KeyFields = {
  id: Type.String({ format: 'uuid' }),
  name: Type.String(),
  scopes: Type.Array(Type.String()),
  prefix: Type.String({
    description: 'the first characters of the key, to tell keys apart; an imported key its first four, or none',
  }),
  origin: Type.Union([Type.Literal('minted'), Type.Literal('imported')], {
    description: '`imported`: brought over from elsewhere (POST /v1/sub-accounts/api-keys/imports)',
  }),
  status: Type.Union([Type.Literal('active'), Type.Literal('expired'), Type.Literal('revoked')], {
    description: '`expired`: not revoked, but past `expires_at`',
  }),
  created_at: Timestamp,
  expires_at: Nullable(Timestamp),
  rolled_from: Nullable(Type.String({ format: 'uuid', description: 'the key this one replaced, when made by a roll' })),
  ip_allowlist: Nullable(Type.Array(Type.String(), { description: 'the addresses it may be used from; null: any' })),
}

/** A reported leak (docs/secret-scanning.md): when, where, and who reported it. */
export const KeyLeak = Type.Object(
  {
    at: Timestamp,
    url: Nullable(Type.String({ description: 'where the key was found, when the report said' })),
    source: Type.String({
      description: 'who reported it: `github` (secret scanning), or `parent` (the account itself)',
    }),
  },
  { additionalProperties: false },
)

export const ApiKey = Type.Object(
  {
    ...KeyFields,
    revoked_at: Nullable(Timestamp),
    last_used_at: Nullable(Timestamp),
    leaked: Nullable(KeyLeak),
  },
  { additionalProperties: false },
)
export type ApiKey = Static<typeof ApiKey>

export const MintedApiKey = Type.Object(
  {
    ...KeyFields,
    api_key: Type.String({ description: 'returned only in this response' }),
    client_secret: Type.String({ description: 'returned only in this response' }),
  },
  { additionalProperties: false },
)
export type MintedApiKey = Static<typeof MintedApiKey>

export const ApiKeyPage = Page(ApiKey)

// Path ids are not validated here: one that is not a UUID is a 404 (docs/api.md), from the handler.
export const KeyParams = Type.Object({ sub_id: Type.String(), key_id: Type.String() })

export const MintKeyBody = Type.Object(
  {
    name: Name,
    scopes: Type.Array(Scope, { minItems: 1, maxItems: 50 }),
    expires_at: Type.Optional(
      Nullable(
        Type.String({
          format: 'date-time',
          maxLength: 64,
          description: `RFC 3339, in the future, at most ${MAX_EXPIRY_YEARS} years ahead; absent or null: never`,
        }),
      ),
    ),
    ip_allowlist: Type.Optional(Nullable(IpAllowlist)),
  },
  { additionalProperties: false },
)

// A roll's body may be absent or `{}`: the overlap is then a day.
export const RollKeyBody = Type.Object(
  {
    expires_in_seconds: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: MAX_ROLL_OVERLAP_SECONDS,
        description: `how long the old key keeps working (default ${DEFAULT_ROLL_OVERLAP_SECONDS}); 0 revokes it at once`,
      }),
    ),
  },
  { additionalProperties: false },
)
