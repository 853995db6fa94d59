// The summaries and descriptions of the management operations, kept apart from their handlers:
// those of sub-accounts, plans and settings here, the others beside this file, a file a group of
// tags (operations-keys.ts, operations-usage.ts, operations-logs.ts).
import { KEY_OPERATION_DOCS } from './operations-keys.js'
import { LOG_OPERATION_DOCS } from './operations-logs.js'
import { USAGE_OPERATION_DOCS } from './operations-usage.js'

/** Sub-accounts, plans and the account's settings. */
const ACCOUNT_OPERATION_DOCS = {
  createSubAccount: {
    summary: 'Create a sub-account',
    description: "Answers 201 with a Location header. `external_id` is unique among the parent's sub-accounts.",
    tags: ['sub-accounts'],
  },
  listSubAccounts: {
    summary: 'List sub-accounts, oldest first',
    description:
      '`sort` orders the list (`created_at`, the default, oldest first; `-created_at`; `name`; `-name`); a cursor ' +
      'pages the sort and filters it came from (another sort: 400 naming the sort it belongs to). `include` adds ' +
      'figures to each sub-account: `key_count` (keys neither revoked nor expired), `usage_this_month` (this UTC ' +
      "month's request units: forwarded requests at their routes' cost, what a monthly quota counts). Without " +
      '`include` the objects are as before.',
    tags: ['sub-accounts'],
  },
  getSubAccount: {
    summary: 'Get a sub-account',
    description: '`include` adds `key_count` and `usage_this_month`, as on the list.',
    tags: ['sub-accounts'],
  },
  updateSubAccount: {
    summary: 'Update a sub-account',
    description:
      'Only the fields given change; `external_id: null` clears it. `limits` is replaced as a whole (a member ' +
      'left out is null; `limits: null` clears both). An empty body is refused.',
    tags: ['sub-accounts'],
  },
  deactivateSubAccount: {
    summary: 'Deactivate a sub-account',
    description: 'Its keys are refused, and it cannot be acted as, until it is reactivated. Repeating is harmless.',
    tags: ['sub-accounts'],
  },
  reactivateSubAccount: {
    summary: 'Reactivate a sub-account',
    description: 'Repeating is harmless.',
    tags: ['sub-accounts'],
  },
  createPlan: {
    summary: 'Create a plan',
    description:
      'A plan holds limits and a key policy, of the shapes a sub-account has, for the sub-accounts that name it ' +
      "(`plan_id`) or, without one, for all of them when it is the account's `default_plan_id`. Answers 201 with a " +
      'Location header.',
    tags: ['plans'],
  },
  listPlans: { summary: 'List plans, oldest first', tags: ['plans'] },
  getPlan: { summary: 'Get a plan', tags: ['plans'] },
  updatePlan: {
    summary: 'Update a plan',
    description:
      "Only the fields given change; `limits` and `key_policy` are replaced as a whole, as a sub-account's. Every " +
      'replica enforces the change for all of its sub-accounts within about a second. An empty body is refused.',
    tags: ['plans'],
  },
  deletePlan: {
    summary: 'Delete a plan',
    description:
      "409 plan_in_use while a sub-account's `plan_id` or the account's `default_plan_id` names it; nothing is changed then.",
    tags: ['plans'],
  },
  getAccountSettings: {
    summary: "The account's settings: its default plan and its leak policy",
    tags: ['sub-accounts'],
  },
  updateAccountSettings: {
    summary: "Change the account's settings",
    description:
      "Any of: `default_plan_id`, one of the account's plans, the plan of every sub-account without a `plan_id` " +
      "(null: none); `leak_policy`, what a leaked key of the account comes to when GitHub's secret scanning or the " +
      'account reports it: `revoke` (the default) or `alert` (an `api_key.leaked` event only). Members left out ' +
      'keep their value; a change writes one `account.settings_updated` event.',
    tags: ['sub-accounts'],
  },
} as const

/** How each operation appears in the OpenAPI document (src/ops/openapi.ts); the router ignores these fields. */
export const OPERATIONS = {
  ...ACCOUNT_OPERATION_DOCS,
  ...KEY_OPERATION_DOCS,
  ...USAGE_OPERATION_DOCS,
  ...LOG_OPERATION_DOCS,
} as const satisfies Record<string, { summary: string; description?: string; tags: readonly string[] }>
