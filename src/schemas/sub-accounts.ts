// TypeBox schemas of the sub-account routes (docs/api.md, Sub-accounts): a sub-account as shown
// (with the figures `include` adds), its list's query, its path, and the create and update bodies.
// The response schemas are the serializers too.
import { Type, type Static } from 'typebox'
import { Limit, NAME_MAX_LENGTH, Name, Nullable, Page, STORABLE_TEXT, Timestamp } from './common.js'
import { KeyPolicy, KeyPolicyBody } from './keys.js'
import { Limits, LimitsBody } from './limits.js'
import { EXTERNAL_ID_PATTERN } from '../shared/identifiers.js'

export const ExternalId = Type.String({
  pattern: EXTERNAL_ID_PATTERN,
  description: '1–128 of A-Z a-z 0-9 . _ - : @ / +',
})

// Written as plain JSON Schema: TypeBox's Record becomes patternProperties "^.*$", and `.` does not
// match a newline, so a key holding one would escape the value check.
export const Metadata = Type.Unsafe<Record<string, string>>({
  type: 'object',
  additionalProperties: { type: 'string', maxLength: 500, pattern: STORABLE_TEXT },
  maxProperties: 50,
  propertyNames: { minLength: 1, maxLength: 40, pattern: STORABLE_TEXT },
  description: 'at most 50 keys of at most 40 characters, string values of at most 500',
})

export const SubAccount = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    name: Type.String(),
    external_id: Nullable(Type.String()),
    status: Type.Union([Type.Literal('active'), Type.Literal('deactivated')]),
    metadata: Type.Unsafe<Record<string, string>>({ type: 'object', additionalProperties: { type: 'string' } }),
    created_at: Timestamp,
    updated_at: Timestamp,
    deactivated_at: Nullable(Timestamp),
    limits: Limits,
    key_policy: KeyPolicy,
  },
  { additionalProperties: false },
)
export type SubAccount = Static<typeof SubAccount>

// What `include` adds to a sub-account (docs/api.md, Sub-accounts): absent unless asked for, so
// that the default answer keeps its shape.
const SubAccountFigures = {
  key_count: Type.Optional(
    Type.Integer({ minimum: 0, description: 'with include=key_count: its keys neither revoked nor expired' }),
  ),
  usage_this_month: Type.Optional(
    Type.Integer({
      minimum: 0,
      description:
        "with include=usage_this_month: this UTC month's request units, its forwarded requests at their routes' " +
        'cost (what a monthly quota counts; refusals left out), about 2 s behind',
    }),
  ),
}
export const SubAccountWithFigures = Type.Object(
  { ...SubAccount.properties, ...SubAccountFigures },
  { additionalProperties: false },
)
export type SubAccountWithFigures = Static<typeof SubAccountWithFigures>

export const SubAccountPage = Page(SubAccountWithFigures)

/** The figures `include` may ask for, comma-separated. */
export const SUB_ACCOUNT_INCLUDES = ['key_count', 'usage_this_month'] as const
export type SubAccountInclude = (typeof SUB_ACCOUNT_INCLUDES)[number]
const Include = Type.String({
  maxLength: 100,
  pattern: `^(${SUB_ACCOUNT_INCLUDES.join('|')})(,(${SUB_ACCOUNT_INCLUDES.join('|')}))*$`,
  description: `figures to add to each sub-account, comma-separated: ${SUB_ACCOUNT_INCLUDES.join(', ')}`,
})

/** The longest `q` of the sub-accounts list: a name's length (no longer prefix can match). */
export const SEARCH_MAX_LENGTH = NAME_MAX_LENGTH

/**
 * A cursor of the sub-accounts list: sorted by name it carries the last name (up to 200
 * characters, 800 bytes of UTF-8), so it may be longer than other lists' cursors.
 */
const SubAccountCursor = Type.String({ minLength: 1, maxLength: 1200, description: 'next_cursor of the previous page' })

export const ListSubAccountsQuery = Type.Object(
  {
    limit: Limit,
    cursor: Type.Optional(SubAccountCursor),
    sort: Type.Optional(
      Type.Union(
        [Type.Literal('created_at'), Type.Literal('-created_at'), Type.Literal('name'), Type.Literal('-name')],
        {
          description:
            '`created_at` (the default: oldest first), `-created_at` (newest first), `name` or `-name` (by name, ' +
            'any case; equal names oldest first, or newest first with `-name`). A cursor pages the sort it came from.',
        },
      ),
    ),
    include: Type.Optional(Include),
    status: Type.Optional(Type.Union([Type.Literal('active'), Type.Literal('deactivated')])),
    external_id: Type.Optional(ExternalId),
    q: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: SEARCH_MAX_LENGTH,
        pattern: STORABLE_TEXT,
        description: 'the start of any word of the name, or of the name or the external_id, case-insensitive',
      }),
    ),
  },
  { additionalProperties: false },
)

/**
 * The query of one sub-account's GET: only `include`. Other parameters were always ignored there,
 * and still are (additionalProperties), so that no client that sent one is refused now.
 */
export const GetSubAccountQuery = Type.Object({ include: Type.Optional(Include) })

// Path ids are not validated here: one that is not a UUID is a 404 (docs/api.md), from the handler.
export const SubAccountParams = Type.Object({ sub_id: Type.String() })

export const CreateSubAccountBody = Type.Object(
  {
    name: Name,
    external_id: Type.Optional(Nullable(ExternalId)),
    metadata: Type.Optional(Metadata),
    limits: Type.Optional(Nullable(LimitsBody)),
    key_policy: Type.Optional(Nullable(KeyPolicyBody)),
  },
  { additionalProperties: false },
)

export const UpdateSubAccountBody = Type.Object(
  {
    name: Type.Optional(Name),
    external_id: Type.Optional(Nullable(ExternalId)),
    metadata: Type.Optional(Metadata),
    limits: Type.Optional(Nullable(LimitsBody)),
    key_policy: Type.Optional(Nullable(KeyPolicyBody)),
  },
  { additionalProperties: false, minProperties: 1 },
)
