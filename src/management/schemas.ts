// TypeBox request and response schemas of the management API (docs/api.md). Response schemas are
// also the serializers: a field they do not name (a key digest, say) cannot leave the gateway.
import { Type, type Static } from 'typebox'
import { IpAllowlist, KeyPolicy, KeyPolicyBody, Scope } from './key-schemas.js'
import { DEFAULT_ROLL_OVERLAP_SECONDS, MAX_EXPIRY_YEARS, MAX_ROLL_OVERLAP_SECONDS } from '../auth/key-expiry.js'
import { LIMIT_BOUNDS } from '../limits/tenant-limits.js'
import { EXTERNAL_ID_PATTERN, UUID_PATTERN } from '../tenancy/identifiers.js'

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) => Type.Union([schema, Type.Null()])

export const Timestamp = Type.String({ format: 'date-time' })

// Postgres text cannot hold U+0000, and jsonb refuses a lone UTF-16 surrogate (text would store
// U+FFFD instead): refuse both here as a 400 rather than fail, or change the text, in the store.
// Ajv compiles patterns with the u flag, so a surrogate pair (an emoji) is one character and passes.
export const STORABLE_TEXT = '^[^\\u0000\\ud800-\\udfff]*$'

// Names are checked again after trimming (1–200 characters); the schema only bounds the input.
export const NAME_MAX_LENGTH = 200
const Name = Type.String({ maxLength: 1000, pattern: STORABLE_TEXT, description: '1–200 characters after trimming' })

export const ExternalId = Type.String({
  pattern: EXTERNAL_ID_PATTERN,
  description: '1–128 of A-Z a-z 0-9 . _ - : @ / +',
})

// Written as plain JSON Schema: TypeBox's Record becomes patternProperties "^.*$", and `.` does not
// match a newline, so a key holding one would escape the value check.
const Metadata = Type.Unsafe<Record<string, string>>({
  type: 'object',
  additionalProperties: { type: 'string', maxLength: 500, pattern: STORABLE_TEXT },
  maxProperties: 50,
  propertyNames: { minLength: 1, maxLength: 40, pattern: STORABLE_TEXT },
  description: 'at most 50 keys of at most 40 characters, string values of at most 500',
})

// Limits (docs/api.md, Limits and quotas). In a body, `limits` replaces the whole object: a member
// left out is null, and `limits: null` clears both.
const LimitRequests = Type.Integer({ ...LIMIT_BOUNDS.requests })
const RateLimit = Type.Object(
  { requests: LimitRequests, per_seconds: Type.Integer({ ...LIMIT_BOUNDS.perSeconds }) },
  { additionalProperties: false, description: 'at most `requests` per `per_seconds` seconds, as a token bucket' },
)
const MonthlyQuota = Type.Object(
  {
    requests: LimitRequests,
    alert_thresholds: Type.Optional(
      Type.Array(Type.Integer({ minimum: 1, maximum: 100 }), {
        minItems: 1,
        maxItems: 5,
        description: 'shares of `requests`, in %, that write usage.threshold_reached (absent: 80 and 100)',
      }),
    ),
  },
  { additionalProperties: false, description: 'at most `requests` per UTC calendar month' },
)
export const LimitsBody = Type.Object(
  { rate: Type.Optional(Nullable(RateLimit)), monthly_quota: Type.Optional(Nullable(MonthlyQuota)) },
  { additionalProperties: false },
)
export const Limits = Type.Object(
  { rate: Nullable(RateLimit), monthly_quota: Nullable(MonthlyQuota) },
  { additionalProperties: false },
)

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

const KeyFields = {
  id: Type.String({ format: 'uuid' }),
  name: Type.String(),
  scopes: Type.Array(Type.String()),
  prefix: Type.String({ description: 'the first characters of the key, to tell keys apart' }),
  status: Type.Union([Type.Literal('active'), Type.Literal('expired'), Type.Literal('revoked')], {
    description: '`expired`: not revoked, but past `expires_at`',
  }),
  created_at: Timestamp,
  expires_at: Nullable(Timestamp),
  rolled_from: Nullable(Type.String({ format: 'uuid', description: 'the key this one replaced, when made by a roll' })),
  ip_allowlist: Nullable(Type.Array(Type.String(), { description: 'the addresses it may be used from; null: any' })),
}

export const ApiKey = Type.Object(
  { ...KeyFields, revoked_at: Nullable(Timestamp), last_used_at: Nullable(Timestamp) },
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

export const Page = <T extends Parameters<typeof Type.Array>[0]>(item: T) =>
  Type.Object({ data: Type.Array(item), next_cursor: Nullable(Type.String()) }, { additionalProperties: false })

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
        "with include=usage_this_month: this UTC month's requests forwarded upstream for it (what a monthly " +
        'quota counts; refusals left out), about 2 s behind',
    }),
  ),
}
export const SubAccountWithFigures = Type.Object(
  { ...SubAccount.properties, ...SubAccountFigures },
  { additionalProperties: false },
)
export type SubAccountWithFigures = Static<typeof SubAccountWithFigures>

export const SubAccountPage = Page(SubAccountWithFigures)
export const ApiKeyPage = Page(ApiKey)

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

export const Cursor = Type.String({ minLength: 1, maxLength: 200, description: 'next_cursor of the previous page' })
/** A page's size when the query gives none: optional to clients, filled in by the validator (useDefaults). */
export const PAGE_LIMIT_DEFAULT = 20
export const Limit = Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: PAGE_LIMIT_DEFAULT }))

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
        description: 'a prefix of the name or of the external_id, case-insensitive',
      }),
    ),
  },
  { additionalProperties: false },
)

/** A page of a list that has no filter: its size and where it starts. */
export const PageQuery = Type.Object({ limit: Limit, cursor: Type.Optional(Cursor) }, { additionalProperties: false })

/**
 * The query of one sub-account's GET: only `include`. Other parameters were always ignored there,
 * and still are (additionalProperties), so that no client that sent one is refused now.
 */
export const GetSubAccountQuery = Type.Object({ include: Type.Optional(Include) })

// Path ids are not validated here: one that is not a UUID is a 404 (docs/api.md), from the handler.
export const SubAccountParams = Type.Object({ sub_id: Type.String() })
export const KeyParams = Type.Object({ sub_id: Type.String(), key_id: Type.String() })

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

export { UUID_PATTERN }

// The account's limits and this month's use (docs/api.md, Limits and quotas).
export const AccountLimits = Type.Object(
  {
    account: Limits,
    month: Type.String({ pattern: '^\\d{4}-\\d{2}$', description: 'the current UTC month, YYYY-MM' }),
    used: Type.Integer({
      minimum: 0,
      description: 'requests of this month forwarded upstream for the parent and its sub-accounts (about 2 s behind)',
    }),
  },
  { additionalProperties: false },
)

/** A route that takes no query parameters still refuses unknown ones. */
export const NoQuery = Type.Object({}, { additionalProperties: false })

// The audit log (docs/events.md). `data.object` and `data.previous` are the API's own objects,
// described in docs/events.md for each type.
const AnyObject = Type.Unsafe<Record<string, unknown>>({ type: 'object', additionalProperties: true })

export const Event = Type.Object(
  {
    id: Type.String({ pattern: '^evt_[0-9A-HJKMNP-TV-Z]{26}$', description: '`evt_` and a ULID' }),
    type: Type.String({ description: 'docs/events.md lists the types' }),
    created_at: Timestamp,
    account_id: Type.String({ format: 'uuid', description: 'the parent account' }),
    actor: Type.Object(
      {
        type: Type.Union([
          Type.Literal('api_key'),
          Type.Literal('operator'),
          Type.Literal('gateway'),
          Type.Literal('portal_session'),
        ]),
        key_id: Nullable(
          Type.String({
            description: 'the calling key; null for the operator (CLI), the gateway (alerts) and a portal session',
          }),
        ),
        id: Type.Optional(Type.String({ description: 'a portal session: its id' })),
        // Only with `expand=actor` (docs/api.md, Audit log): who the actor is, as the store has it now.
        name: Type.Optional(
          Nullable(Type.String({ description: 'with expand=actor, a key: its name (null when no longer found)' })),
        ),
        prefix: Type.Optional(
          Nullable(Type.String({ description: 'with expand=actor, a key: its prefix (null when no longer found)' })),
        ),
        sub_account_id: Type.Optional(
          Nullable(
            Type.String({
              description:
                "with expand=actor, a portal session: the sub-account it was made for; a key: its sub-account's id, null for the parent's own key",
            }),
          ),
        ),
      },
      { additionalProperties: false },
    ),
    target: Type.Object(
      {
        type: Type.Union([
          Type.Literal('sub_account'),
          Type.Literal('api_key'),
          Type.Literal('account'),
          Type.Literal('webhook_endpoint'),
          Type.Literal('portal_session'),
        ]),
        id: Type.String(),
      },
      { additionalProperties: false },
    ),
    request_id: Nullable(Type.String()),
    source_ip: Nullable(Type.String({ description: 'the client address; null for the operator (CLI) and alerts' })),
    data: Type.Object(
      {
        object: AnyObject,
        previous: Nullable(AnyObject),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
)
export type Event = Static<typeof Event>

export const EventPage = Page(Event)

export const AccountScopes = Type.Object(
  {
    allowed_scopes: Nullable(
      Type.Array(Type.String(), {
        description:
          "the operator's scope ceiling for the account (scopes and patterns such as tracking:*): a sub-account key's scopes must lie within it; null: any scope but sub_accounts:*",
      }),
    ),
  },
  { additionalProperties: false },
)

// Not validated here: an id that is not an event id is a 404, as for the other resources.
export const EventParams = Type.Object({ event_id: Type.String() })

export const EventsQuery = Type.Object(
  {
    type: Type.Optional(
      Type.String({ pattern: '^[a-z_]{1,40}\\.([a-z_]{1,40}|\\*)$', description: 'an event type, or `<resource>.*`' }),
    ),
    target_id: Type.Optional(Type.String({ minLength: 1, maxLength: 200, pattern: STORABLE_TEXT })),
    sub_account_id: Type.Optional(
      Type.String({
        pattern: UUID_PATTERN,
        description: "a sub-account's events: those of the sub-account itself, of its keys and of its portal sessions",
      }),
    ),
    expand: Type.Optional(
      Type.Literal('actor', { description: '`actor`: each actor also carries its name, prefix or sub-account' }),
    ),
    since: Type.Optional(Type.String({ format: 'date-time', maxLength: 64, description: 'RFC 3339, inclusive' })),
    until: Type.Optional(Type.String({ format: 'date-time', maxLength: 64, description: 'RFC 3339, exclusive' })),
    limit: Limit,
    cursor: Type.Optional(Cursor),
  },
  { additionalProperties: false },
)
