// TypeBox schemas of the portal session routes (docs/api.md, Portal sessions). The response
// schemas are the serializers too: the link (with its one-time token) leaves only through
// CreatedPortalSession.
import { Type, type Static } from 'typebox'
import { Nullable, STORABLE_TEXT, Timestamp } from './common.js'

/** What a session may do in the portal; each names the portal's routes it opens (portal/api-routes.ts). */
export const PORTAL_PERMISSIONS = ['keys:read', 'keys:write', 'usage:read', 'requests:read'] as const
export type PortalPermission = (typeof PORTAL_PERMISSIONS)[number]

export const PORTAL_SESSION_TTL = { min: 60, max: 3600, default: 900 } as const
export const RETURN_URL_MAX_LENGTH = 2048

export const CreatePortalSessionBody = Type.Object(
  {
    permissions: Type.Array(Type.Union(PORTAL_PERMISSIONS.map((p) => Type.Literal(p))), {
      minItems: 1,
      maxItems: PORTAL_PERMISSIONS.length,
      uniqueItems: true,
      description: 'what the session may do: `keys:write` mints, rolls and revokes; the others read',
    }),
    expires_in_seconds: Type.Optional(
      Type.Integer({
        minimum: PORTAL_SESSION_TTL.min,
        maximum: PORTAL_SESSION_TTL.max,
        default: PORTAL_SESSION_TTL.default,
        description: 'how long the session (and its link) lasts',
      }),
    ),
    return_url: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: RETURN_URL_MAX_LENGTH,
        pattern: STORABLE_TEXT,
        description: "an https URL of the parent's own site, which the portal links back to",
      }),
    ),
  },
  { additionalProperties: false },
)

const SessionFields = {
  id: Type.String({ format: 'uuid' }),
  sub_account_id: Type.String({ format: 'uuid' }),
  permissions: Type.Array(Type.String()),
  return_url: Nullable(Type.String()),
  created_at: Timestamp,
  expires_at: Timestamp,
  link_used: Type.Boolean({ description: "whether the link's one-time token has been exchanged" }),
}

export const PortalSession = Type.Object(SessionFields, { additionalProperties: false })
export type PortalSession = Static<typeof PortalSession>

export const CreatedPortalSession = Type.Object(
  {
    ...SessionFields,
    url: Type.String({
      description:
        "`<ISSUER_URL>/portal/#<one-time token>`: give it to the sub-account's user; it works once, until `expires_at`; returned only in this response",
    }),
  },
  { additionalProperties: false },
)

export const PortalSessionList = Type.Object({ data: Type.Array(PortalSession) }, { additionalProperties: false })

export const PortalSessionParams = Type.Object({ sub_id: Type.String(), session_id: Type.String() })
