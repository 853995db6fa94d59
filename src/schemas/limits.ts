// TypeBox schemas of a tenant's limits (docs/api.md, Limits and quotas): the rate and the monthly
// quota, as a body sends them and as the API shows them, for a sub-account and for the account.
// Their bounds are those the limiter uses (shared/tenant-limits.ts).
import { Type } from 'typebox'
import { Nullable } from './common.js'
import { LIMIT_BOUNDS } from '../shared/tenant-limits.js'

// In a body, `limits` replaces the whole object: a member left out is null, and `limits: null`
// clears both.
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
const Units = Type.Integer({ ...LIMIT_BOUNDS.units })
const MeterRate = Type.Object(
  { units: Units, per_seconds: Type.Integer({ ...LIMIT_BOUNDS.perSeconds }) },
  {
    additionalProperties: false,
    description: 'at most `units` of the meter per `per_seconds` seconds, as a token bucket',
  },
)
const MeterQuota = Type.Object(
  {
    units: Units,
    alert_thresholds: Type.Optional(
      Type.Array(Type.Integer({ minimum: 1, maximum: 100 }), {
        minItems: 1,
        maxItems: 5,
        description: 'shares of `units`, in %, that write usage.threshold_reached (absent: 80 and 100)',
      }),
    ),
  },
  { additionalProperties: false, description: 'at most `units` of the meter per UTC calendar month' },
)
const meterLimits = (optional: boolean) =>
  Type.Object(
    optional
      ? { rate: Type.Optional(Nullable(MeterRate)), monthly_quota: Type.Optional(Nullable(MeterQuota)) }
      : { rate: Nullable(MeterRate), monthly_quota: Nullable(MeterQuota) },
    { additionalProperties: false },
  )
// By meter name (a route's meter, never `requests`; checked by the route with the name in words:
// shared/tenant-limits.ts meterLimitsProblem). Units are known when the answer ends: a request is
// admitted while the balance is above zero and charged after (docs/api.md, Limits in units).
const meters = (optional: boolean) =>
  Type.Record(Type.String({ pattern: '^[a-z][a-z0-9_]{0,31}$' }), meterLimits(optional), {
    description:
      'limits in the units a route meter reports, by meter name: a request passes while the balance is above zero, and its units are charged when its answer ends',
  })
const bodyMembers = {
  rate: Type.Optional(Nullable(RateLimit)),
  monthly_quota: Type.Optional(Nullable(MonthlyQuota)),
  meters: Type.Optional(meters(true)),
}
const shownMembers = {
  rate: Nullable(RateLimit),
  monthly_quota: Nullable(MonthlyQuota),
  meters: Type.Optional(meters(false)),
}
// Prepaid credits by meter name (a route's meter, checked as `meters` are): a request passes while
// the sub-account's balance of grants of that meter is above zero (docs/api.md, Credits).
const LOW_THRESHOLD = {
  minimum: 1,
  maximum: 99,
  description: 'credits.low is written when the balance falls below this share (%) of the units its live grants gave',
}
const REQUIRED = Type.Literal(true, { description: 'a request under it passes only while the balance is above zero' })
const credit = (shown: boolean) =>
  Type.Object(
    {
      required: REQUIRED,
      low_threshold_percent: shown
        ? Type.Integer(LOW_THRESHOLD)
        : Type.Optional(Type.Integer({ ...LOW_THRESHOLD, description: `${LOW_THRESHOLD.description}; default 10` })),
    },
    { additionalProperties: false },
  )
const credits = (shown: boolean) =>
  Type.Record(Type.String({ pattern: '^[a-z][a-z0-9_]{0,31}$' }), credit(shown), {
    description:
      "prepaid credits by meter name: a request passes while the sub-account's balance of that meter is above zero",
  })
// Shadow limits: the same shape, counted as enforced limits are, never refusing (docs/api.md).
const SHADOW = 'limits counted as enforced ones are that never refuse: what a new limit would refuse is seen first'
/** Limits as a simulation takes them: enforced ones only, the body's members (limit-simulations.ts). */
export const EnforcedLimitsBody = Type.Object(bodyMembers, { additionalProperties: false })
export const LimitsBody = Type.Object(
  {
    ...bodyMembers,
    credits: Type.Optional(credits(false)),
    shadow: Type.Optional(Nullable(Type.Object(bodyMembers, { additionalProperties: false, description: SHADOW }))),
  },
  { additionalProperties: false },
)
export const Limits = Type.Object(
  {
    ...shownMembers,
    credits: Type.Optional(credits(true)),
    shadow: Type.Optional(Type.Object(shownMembers, { additionalProperties: false, description: SHADOW })),
  },
  { additionalProperties: false },
)
