// TypeBox schemas of the plan routes and the account's settings (docs/api.md, Plans): a plan as
// shown, its list, its path, its create and update bodies; `limits` and `key_policy` are a
// sub-account's own schemas, so that a plan holds exactly what a sub-account may.
import { Type, type Static } from 'typebox'
import { Name, Nullable, Page, Timestamp } from './common.js'
import { KeyPolicy, KeyPolicyBody } from './keys.js'
import { Limits, LimitsBody } from './limits.js'
import { Metadata } from './sub-accounts.js'

export const Plan = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    name: Type.String(),
    limits: Limits,
    key_policy: KeyPolicy,
    metadata: Type.Unsafe<Record<string, string>>({ type: 'object', additionalProperties: { type: 'string' } }),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { additionalProperties: false },
)
export type Plan = Static<typeof Plan>

export const PlanPage = Page(Plan)

// Path ids are not validated here: one that is not a UUID is a 404, from the handler.
export const PlanParams = Type.Object({ plan_id: Type.String() })

export const CreatePlanBody = Type.Object(
  {
    name: Name,
    limits: Type.Optional(Nullable(LimitsBody)),
    key_policy: Type.Optional(Nullable(KeyPolicyBody)),
    metadata: Type.Optional(Metadata),
  },
  { additionalProperties: false },
)

export const UpdatePlanBody = Type.Object(
  {
    name: Type.Optional(Name),
    limits: Type.Optional(Nullable(LimitsBody)),
    key_policy: Type.Optional(Nullable(KeyPolicyBody)),
    metadata: Type.Optional(Metadata),
  },
  { additionalProperties: false, minProperties: 1 },
)

/** The calling account's settings for its sub-accounts. */
