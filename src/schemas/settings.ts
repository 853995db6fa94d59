// TypeBox schemas of a parent account's settings (docs/api.md, Settings): GET and PATCH
// /v1/sub-accounts/settings. One object for every setting a parent sets for itself: its default plan
// (docs/api.md, Plans) and what a leaked key comes to (docs/secret-scanning.md).
import { Type } from 'typebox'
import { Nullable } from './common.js'

export const LeakPolicy = Type.Union([Type.Literal('revoke'), Type.Literal('alert')], {
  description: 'what a leaked key of the account comes to: `revoke` (the default), at once; `alert`: an event only',
})

export const AccountSettings = Type.Object(
  {
    default_plan_id: Nullable(
      Type.String({ format: 'uuid', description: 'the plan of the sub-accounts without a plan_id; null: none' }),
    ),
    leak_policy: LeakPolicy,
  },
  { additionalProperties: false },
)

export const UpdateAccountSettingsBody = Type.Object(
  {
    default_plan_id: Type.Optional(
      Nullable(Type.String({ format: 'uuid', description: "one of the account's plans, or null for none" })),
    ),
    leak_policy: Type.Optional(LeakPolicy),
  },
  { additionalProperties: false, minProperties: 1 },
)
