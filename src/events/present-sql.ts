// The API's objects built in SQL, for the events a change writes in its own statement
// (store/events.ts changeWithEvent): field for field what schemas/present.ts and
// auth/key-changes.ts keyObject make of the same row. test/integration/events.test.ts holds each
// event's object equal to the API's answer, so the two cannot drift apart unseen.
import { planInForceSql } from '../store/plans.js'

/** A timestamp column as Date#toISOString writes it: UTC, milliseconds truncated, `Z`. */
export const isoSql = (column: string) => `to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`

/** Limits as shown when none are stored (shared/tenant-limits.ts shownLimits). */
export const NO_LIMITS = `'{"rate": null, "monthly_quota": null}'::jsonb`

/** A key policy as shown when none is stored (guardrails/key-policy.ts shownKeyPolicy). */
export const NO_KEY_POLICY = `'{"allowed_scopes": null, "max_ttl_seconds": null, "ip_allowlist": null}'::jsonb`

/** presentSubAccount of the row named `alias` (tenants' columns). */
export const subAccountObject = (alias: string) => `jsonb_build_object(
  'id', ${alias}.id,
  'name', ${alias}.name,
  'external_id', ${alias}.external_id,
  'status', ${alias}.status,
  'metadata', ${alias}.metadata,
  'created_at', ${isoSql(`${alias}.created_at`)},
  'updated_at', ${isoSql(`${alias}.updated_at`)},
  'deactivated_at', ${isoSql(`${alias}.deactivated_at`)},
  'limits', coalesce(${alias}.limits, ${NO_LIMITS}),
  'key_policy', coalesce(${alias}.key_policy, ${NO_KEY_POLICY}),
  'placement', ${alias}.placement,
  'plan_id', ${alias}.plan_id,
  'effective_limits', coalesce(plan_effective_limits(${alias}.limits, ${planInForceSql(alias, 'limits')}), ${NO_LIMITS}),
  'effective_key_policy',
    coalesce(plan_effective_key_policy(${alias}.key_policy, ${planInForceSql(alias, 'key_policy')}), ${NO_KEY_POLICY}))`

/** presentPlan of the row named `alias` (plans' columns). */
export const planObject = (alias: string) => `jsonb_build_object(
  'id', ${alias}.id,
  'name', ${alias}.name,
  'limits', coalesce(${alias}.limits, ${NO_LIMITS}),
  'key_policy', coalesce(${alias}.key_policy, ${NO_KEY_POLICY}),
  'metadata', ${alias}.metadata,
  'created_at', ${isoSql(`${alias}.created_at`)},
  'updated_at', ${isoSql(`${alias}.updated_at`)})`

/** keyState at the statement's time: `expired` once an active key is past `expires_at`. */
export const keyStateSql = (alias: string) =>
  `case when ${alias}.status = 'revoked' then 'revoked' when ${alias}.expires_at <= now() then 'expired' else 'active' end`

/**
 * keyObject of the row named `alias` (api_keys' columns, scopes already as jsonb): the key as the
 * API shows it, and its sub-account, null for the key of the account `accountId` (a placeholder).
 */
export const keyObject = (alias: string, accountId: string) => `jsonb_build_object(
  'id', ${alias}.id,
  'name', ${alias}.name,
  'scopes', ${alias}.scopes,
  'prefix', ${alias}.prefix,
  'origin', ${alias}.origin,
  'status', ${keyStateSql(alias)},
  'created_at', ${isoSql(`${alias}.created_at`)},
  'expires_at', ${isoSql(`${alias}.expires_at`)},
  'rolled_from', ${alias}.rolled_from,
  'ip_allowlist', ${alias}.ip_allowlist,
  'revoked_at', ${isoSql(`${alias}.revoked_at`)},
  'last_used_at', ${isoSql(`${alias}.last_used_at`)},
  'leaked', ${alias}.leaked,
  'sub_account_id', case when ${alias}.tenant_id = ${accountId}::uuid then null else ${alias}.tenant_id end)`
