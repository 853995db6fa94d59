// TypeBox schemas of the usage report (docs/api.md, Usage report). The response schema is the
// serializer too.
import { Type, type Static } from 'typebox'
import { Cursor, Limit, Nullable } from './common.js'
import { UUID_PATTERN } from '../shared/identifiers.js'

const Count = Type.Integer({ minimum: 0 })

// The usage report (docs/api.md). Dates are checked by the handler, which also takes an RFC 3339
// date-time as its UTC date.
export const UsageQuery = Type.Object(
  {
    from: Type.Optional(Type.String({ maxLength: 64, description: 'YYYY-MM-DD (UTC), inclusive' })),
    to: Type.Optional(Type.String({ maxLength: 64, description: 'YYYY-MM-DD (UTC), inclusive' })),
    limit: Limit,
    cursor: Type.Optional(Cursor),
    sub_account_id: Type.Optional(
      Type.String({ pattern: UUID_PATTERN, description: 'only this sub-account (at most one entry)' }),
    ),
    granularity: Type.Optional(
      Type.Union([Type.Literal('range'), Type.Literal('day')], {
        description: "`day`: each day of `days` also split by status class, with its limits' 429s (default `range`)",
      }),
    ),
    include: Type.Optional(
      Type.Literal('name', { description: "`name`: each entry also carries the sub-account's `name`" }),
    ),
  },
  { additionalProperties: false },
)

// A sub-account's usage by key (docs/api.md, Usage by key).
export const KeyUsageQuery = Type.Object(
  {
    from: Type.Optional(Type.String({ maxLength: 64, description: 'YYYY-MM-DD (UTC), inclusive' })),
    to: Type.Optional(Type.String({ maxLength: 64, description: 'YYYY-MM-DD (UTC), inclusive' })),
    limit: Limit,
    cursor: Type.Optional(Cursor),
  },
  { additionalProperties: false },
)

/**
 * Units by meter (docs/api.md, Units): `requests`, the request units of the forwarded requests
 * (each counts its route's cost), always; each meter an upstream reported, once it has use.
 */
export const Units = Type.Object(
  { requests: Count },
  {
    additionalProperties: Count,
    description:
      "`requests`: request units (forwarded requests, each counted at its route's cost); then each reported meter with use",
  },
)
export type Units = Static<typeof Units>

const ByStatus = Type.Object(
  { '2xx': Count, '3xx': Count, '4xx': Count, '5xx': Count },
  { additionalProperties: false },
)
const Limited = Type.Object(
  { rate: Count, quota: Count },
  { additionalProperties: false, description: "the gateway's 429s of a rate limit and of a monthly quota" },
)

export const UsageEntry = Type.Object(
  {
    sub_account_id: Type.String({ format: 'uuid' }),
    external_id: Nullable(Type.String()),
    name: Type.Optional(Type.String({ description: "with include=name: the sub-account's name" })),
    requests: Count,
    by_status: ByStatus,
    days: Type.Array(
      Type.Object(
        {
          date: Type.String({ format: 'date' }),
          requests: Count,
          // With granularity=day only.
          by_status: Type.Optional(ByStatus),
          limited: Type.Optional(Limited),
          units: Units,
        },
        { additionalProperties: false },
      ),
    ),
    limited: Limited,
    units: Units,
  },
  { additionalProperties: false },
)
export type UsageEntry = Static<typeof UsageEntry>

export const UsageReport = Type.Object(
  {
    from: Type.String({ format: 'date' }),
    to: Type.String({ format: 'date' }),
    data: Type.Array(UsageEntry),
    next_cursor: Nullable(Type.String()),
  },
  { additionalProperties: false },
)

export const KeyUsageEntry = Type.Object(
  {
    key_id: Type.String({ format: 'uuid' }),
    name: Type.String({ description: "the key's name" }),
    prefix: Type.String({ description: 'the first characters of the key' }),
    owner: Type.Union([Type.Literal('sub_account'), Type.Literal('parent')], {
      description: "`sub_account`: one of its own keys; `parent`: a parent's key acting as it",
    }),
    requests: Count,
    by_status: ByStatus,
    days: Type.Array(
      Type.Object(
        { date: Type.String({ format: 'date' }), requests: Count, units: Units },
        { additionalProperties: false },
      ),
    ),
    units: Units,
  },
  { additionalProperties: false },
)
export type KeyUsageEntry = Static<typeof KeyUsageEntry>

export const KeyUsageReport = Type.Object(
  {
    from: Type.String({ format: 'date' }),
    to: Type.String({ format: 'date' }),
    sub_account_id: Type.String({ format: 'uuid' }),
    data: Type.Array(KeyUsageEntry),
    next_cursor: Nullable(Type.String()),
  },
  { additionalProperties: false },
)
