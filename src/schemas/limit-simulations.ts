// TypeBox schemas of the limit simulator (docs/api.md, The limit simulator): what it is asked to
// replay, and what the limits would have done.
import { Type } from 'typebox'
import { Nullable } from './common.js'
import { EnforcedLimitsBody } from './limits.js'

export const SimulationBody = Type.Object(
  {
    limits: EnforcedLimitsBody,
    sub_account_id: Type.Optional(
      Type.String({
        description: 'one sub-account of the caller; absent: each of its sub-accounts, under the same limits',
      }),
    ),
    from: Type.String({ format: 'date-time', description: 'the first instant replayed (RFC 3339)' }),
    to: Type.String({ format: 'date-time', description: 'the end of the range, not replayed (RFC 3339)' }),
  },
  { additionalProperties: false },
)

export const SimulatedSubAccount = Type.Object(
  {
    sub_account_id: Type.String({ format: 'uuid' }),
    requests: Type.Integer({ description: 'its requests replayed: forwarded, or refused by a limit' }),
    would_refuse: Type.Integer({ description: 'of them, those the limits would have refused' }),
    first_refusal_at: Nullable(Type.String({ format: 'date-time' })),
    peak_second: Type.Object(
      { at: Type.String({ format: 'date-time' }), requests: Type.Integer() },
      { additionalProperties: false, description: 'the second that saw the most of its requests' },
    ),
    units: Type.Record(Type.String(), Type.Integer({ minimum: 0 }), {
      description: "what its requests counted, by meter: `requests` at their routes' cost, and those reported",
    }),
  },
  { additionalProperties: false },
)

export const Simulation = Type.Object(
  {
    data: Type.Array(SimulatedSubAccount, {
      description: 'each sub-account with requests in the range, most refused first',
    }),
    totals: Type.Object({ requests: Type.Integer(), would_refuse: Type.Integer() }, { additionalProperties: false }),
  },
  { additionalProperties: false },
)
