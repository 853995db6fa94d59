// The calling parent's settings (docs/api.md, Settings): its default plan, the plan of its
// sub-accounts without one (docs/api.md, Plans), and its leak_policy, what a leaked key of it comes
// to (docs/secret-scanning.md). One object, one event (account.settings_updated) for any change.
import { cacheKeys } from '../cache/index.js'
import { changeAccountSettings } from '../events/account-settings.js'
import { NoQuery } from '../schemas/common.js'
import { AccountSettings, UpdateAccountSettingsBody } from '../schemas/settings.js'
import { accountSettings } from '../store/account-settings.js'
import { type ManagementContext, managementOperation, notFound, originOf, parentOf } from './common.js'
import type { OperationTable } from './operation-table.js'
import { accountOperation } from './operation-shapes.js'
import { checkOwnPlan, withPlanStillThere } from './sub-account-plans.js'

export const SETTINGS_PATH = '/settings'

export const SETTINGS_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'GET',
    url: SETTINGS_PATH,
    ...accountOperation('sub_accounts:read', 'getAccountSettings', {
      querystring: NoQuery,
      response: { 200: AccountSettings },
    }),
    async handler(request, _reply, { sql }) {
      const settings = await accountSettings(sql, parentOf(request).id)
      if (settings === null) throw notFound('account')
      return settings
    },
  }),

  managementOperation({
    method: 'PATCH',
    url: SETTINGS_PATH,
    ...accountOperation('sub_accounts:write', 'updateAccountSettings', {
      body: UpdateAccountSettingsBody,
      response: { 200: AccountSettings },
    }),
    async handler(request, _reply, { sql, cache }) {
      const accountId = parentOf(request).id
      const { body } = request
      const defaultPlanId =
        body.default_plan_id === undefined ? undefined : (body.default_plan_id?.toLowerCase() ?? null)
      if (defaultPlanId !== undefined) await checkOwnPlan(sql, accountId, defaultPlanId, '/body/default_plan_id')
      const done = await withPlanStillThere('/body/default_plan_id', () =>
        changeAccountSettings(
          sql,
          accountId,
          { default_plan_id: defaultPlanId, leak_policy: body.leak_policy },
          originOf(request),
        ),
      )
      if (done === null) throw notFound('account')
      // The account's record names its default plan (the limiter reads it for its sub-accounts);
      // nothing caches the leak_policy, which a leak reads from Postgres where it applies it.
      if (done.changed && defaultPlanId !== undefined) await cache.invalidate([cacheKeys.tenant(accountId)])
      return done.settings
    },
  }),
]
