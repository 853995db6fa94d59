// TypeBox schemas of a sub-account's prepaid credits (docs/api.md, Credits): a grant as shown, the
// body that makes one, the balances and grants of GET …/credits, and the paths. The response
// schemas are the serializers too.
import { Type, type Static } from 'typebox'
import { Nullable, Timestamp } from './common.js'
import { LIMIT_BOUNDS } from '../shared/tenant-limits.js'
import { Metadata } from './sub-accounts.js'

/** A grant's `priority` when the body gives none; lower burns first. */
export const DEFAULT_GRANT_PRIORITY = 100

const MeterName = Type.String({
  pattern: '^[a-z][a-z0-9_]{0,31}$',
  description: 'a route meter (never `requests`): the units its answers report burn the grant',
})

export const CreateCreditGrantBody = Type.Object(
  {
    meter: MeterName,
    units: Type.Integer({ ...LIMIT_BOUNDS.units, description: 'units granted, 1 to 10^12' }),
    expires_at: Type.Optional(
      Nullable(
        Type.String({ format: 'date-time', description: 'in the future; what is left is gone at this instant' }),
      ),
    ),
    priority: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: 1000,
        description: `lower burns first; default ${DEFAULT_GRANT_PRIORITY}. Ties burn the soonest to expire, then the oldest`,
      }),
    ),
    metadata: Type.Optional(Metadata),
  },
  { additionalProperties: false },
)

export const CreditGrant = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    meter: Type.String(),
    units: Type.Integer({ description: 'units granted' }),
    units_left: Type.Integer({ description: 'what use has not burned; 0 once the grant is voided or expired' }),
    priority: Type.Integer(),
    expires_at: Nullable(Timestamp),
    voided_at: Nullable(Timestamp),
    created_at: Timestamp,
    metadata: Type.Unsafe<Record<string, string>>({ type: 'object', additionalProperties: { type: 'string' } }),
  },
  { additionalProperties: false },
)
export type CreditGrant = Static<typeof CreditGrant>

export const CreditBalances = Type.Object(
  {
    balances: Type.Array(
      Type.Object(
        {
          meter: Type.String(),
          units_left: Type.Integer({ description: 'the units left of the live grants of this meter' }),
        },
        { additionalProperties: false },
      ),
      { description: 'by meter name: each meter with a grant or a credit limit' },
    ),
    grants: Type.Array(CreditGrant, {
      description: 'live grants first, in the order use burns them; then voided and expired ones, newest first',
    }),
  },
  { additionalProperties: false },
)

// Path ids are not validated here: one that is not a UUID is a 404 (docs/api.md), from the handler.
export const CreditGrantParams = Type.Object({ sub_id: Type.String(), grant_id: Type.String() })

// A sub-account's credits over time (docs/api.md, Credits): what its grants held, point by point.
export const CreditHistoryQuery = Type.Object(
  {
    from: Type.Optional(Type.String({ maxLength: 64, description: 'YYYY-MM-DD (UTC), inclusive' })),
    to: Type.Optional(Type.String({ maxLength: 64, description: 'YYYY-MM-DD (UTC), inclusive' })),
  },
  { additionalProperties: false },
)

export const CreditHistoryPoint = Type.Object(
  {
    at: Timestamp,
    kind: Type.Union(
      [
        Type.Literal('start'),
        Type.Literal('granted'),
        Type.Literal('burned'),
        Type.Literal('expired'),
        Type.Literal('voided'),
        Type.Literal('end'),
      ],
      {
        description:
          '`granted` (a grant made), `burned` (the use of a usage period, at its end), `expired` and `voided` (what ' +
          'was left of a grant gone); `start` and `end`: the units left at the bounds of the range',
      },
    ),
    change: Type.Integer({
      description: 'what the point changed: positive for a grant, negative otherwise; 0 at start and end',
    }),
    units_left: Type.Integer({ description: 'the units left in the live grants of the meter after this point' }),
    grant_id: Nullable(
      Type.String({ format: 'uuid', description: 'the grant made, expired or voided; null otherwise' }),
    ),
  },
  { additionalProperties: false },
)
export type CreditHistoryPoint = Static<typeof CreditHistoryPoint>
/** What changed the units left at a point of the history; `start` and `end` bound the range. */
export type CreditHistoryKind = CreditHistoryPoint['kind']

export const CreditHistory = Type.Object(
  {
    from: Type.String({ format: 'date' }),
    to: Type.String({ format: 'date' }),
    meters: Type.Array(
      Type.Object(
        {
          meter: Type.String(),
          owed_units: Type.Integer({
            description: 'units used beyond every grant, owed now (the next grant pays them first): not in the points',
          }),
          points: Type.Array(CreditHistoryPoint, { description: 'in time order, from `start` to `end`' }),
        },
        { additionalProperties: false },
      ),
      { description: 'by meter name: each meter with a grant or a credit limit' },
    ),
  },
  { additionalProperties: false },
)
export type CreditHistory = Static<typeof CreditHistory>
