// The management API's objects, as the server's TypeBox schemas define them: a change of a schema
// breaks the console's typecheck (`npm run typecheck`). Type-only imports: esbuild erases them, so
// no server code reaches the bundle (test/console/serving.test.ts checks the bundle).
import type { Static } from 'typebox'
import type { AccountLimits as AccountLimitsSchema } from '../../schemas/accounts.js'
import type {
  ApiKey as ApiKeySchema,
  KeyPolicy as KeyPolicySchema,
  MintedApiKey as MintedApiKeySchema,
  MintKeyBody as MintKeyBodySchema,
} from '../../schemas/keys.js'
import type { Event as EventSchema } from '../../schemas/events.js'
import type {
  CreditBalances as CreditBalancesSchema,
  CreditGrant as CreditGrantSchema,
  CreditHistory as CreditHistorySchema,
} from '../../schemas/credits.js'
import type { Limits as LimitsSchema } from '../../schemas/limits.js'
import type { Plan as PlanSchema } from '../../schemas/plans.js'
import type { Simulation as SimulationSchema } from '../../schemas/limit-simulations.js'
import type {
  SubAccount as SubAccountSchema,
  SubAccountWithFigures as SubAccountWithFiguresSchema,
} from '../../schemas/sub-accounts.js'
import type { RequestRecord as RequestRecordSchema } from '../../schemas/requests.js'
import type { RouteStatus as RouteStatusSchema } from '../../schemas/routes.js'
import type { KeyUsageEntry as KeyUsageEntrySchema, UsageEntry as UsageEntrySchema } from '../../schemas/usage.js'
import type { ReconciliationEntry as ReconciliationEntrySchema } from '../../schemas/usage-reconciliation.js'
import type {
  DeliveryAttempt as DeliveryAttemptSchema,
  WebhookEndpoint as WebhookEndpointSchema,
} from '../../schemas/webhooks.js'

export type Limits = Static<typeof LimitsSchema>
export type SubAccount = Static<typeof SubAccountSchema>
export type Plan = Static<typeof PlanSchema>
/** As the list and a GET with `include` give it: `key_count` and `usage_this_month` when asked for. */
export type SubAccountListed = Static<typeof SubAccountWithFiguresSchema>
export type ApiKey = Static<typeof ApiKeySchema>
export type MintedKey = Static<typeof MintedApiKeySchema>
export type MintKeyRequest = Static<typeof MintKeyBodySchema>
/** As a sub-account shows it (every member, null where none is set), and as the console sends it. */
export type KeyPolicy = Static<typeof KeyPolicySchema>
export type AuditEvent = Static<typeof EventSchema>
export type UsageEntry = Static<typeof UsageEntrySchema>
export type KeyUsageEntry = Static<typeof KeyUsageEntrySchema>
export type ReconciliationEntry = Static<typeof ReconciliationEntrySchema>
export type AccountLimits = Static<typeof AccountLimitsSchema>
export type WebhookEndpoint = Static<typeof WebhookEndpointSchema>
export type Delivery = Static<typeof DeliveryAttemptSchema>
export type RequestRecord = Static<typeof RequestRecordSchema>
/** What the limit simulator answers: per sub-account, most refused first, and the totals. */
export type Simulation = Static<typeof SimulationSchema>
/** A proxied route as GET /routes lists it: its targets' state now, and whether it is in panic. */
export type RouteStatus = Static<typeof RouteStatusSchema>
/** GET …/credits: each meter's balance, and the grants (live first, in the order use burns them). */
export type Credits = Static<typeof CreditBalancesSchema>
export type CreditGrant = Static<typeof CreditGrantSchema>
/** GET …/credits/history: each meter's units left, point by point. */
export type CreditHistory = Static<typeof CreditHistorySchema>
export type CreditSeries = CreditHistory['meters'][number]
