// TypeBox schemas of what the account routes answer about the parent account itself (docs/api.md,
// Limits and quotas): its limits with this month's use, and the operator's scope ceiling.
import { Type } from 'typebox'
import { Nullable } from './common.js'
import { Limits } from './limits.js'

// The account's limits and this month's use (docs/api.md, Limits and quotas).
export const AccountLimits = Type.Object(
  {
    account: Limits,
    month: Type.String({ pattern: '^\\d{4}-\\d{2}$', description: 'the current UTC month, YYYY-MM' }),
    used: Type.Integer({
      minimum: 0,
      description:
        "request units of this month (forwarded requests at their routes' cost) for the parent and its sub-accounts (about 2 s behind)",
    }),
  },
  { additionalProperties: false },
)

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
