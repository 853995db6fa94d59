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
export const LimitsBody = Type.Object(
  { rate: Type.Optional(Nullable(RateLimit)), monthly_quota: Type.Optional(Nullable(MonthlyQuota)) },
  { additionalProperties: false },
)
export const Limits = Type.Object(
  { rate: Nullable(RateLimit), monthly_quota: Nullable(MonthlyQuota) },
  { additionalProperties: false },
)
