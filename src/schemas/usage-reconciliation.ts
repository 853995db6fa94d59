// TypeBox schemas of usage reconciliation (docs/billing.md, Reconciliation): its query and answer.
import { Type } from 'typebox'
import { Nullable } from './common.js'
import { UsageExportQuery } from './usage-export.js'

export const UsageReconciliationQuery = Type.Omit(UsageExportQuery, ['format'], { additionalProperties: false })

const Units = Type.Integer()

export const ReconciliationDifference = Type.Object(
  {
    against: Type.Union([Type.Literal('limiter'), Type.Literal('log'), Type.Literal('export')], {
      description: 'the count the meter is compared with',
    }),
    kind: Type.Union(
      [
        Type.Literal('log_dropped'),
        Type.Literal('late'),
        Type.Literal('open_period'),
        Type.Literal('log_expired'),
        Type.Literal('not_exported'),
        Type.Literal('not_limited'),
        Type.Literal('replica_lost'),
        Type.Literal('unexplained'),
      ],
      { description: 'what explains it; `unexplained` when nothing does' },
    ),
    units: Type.Integer({
      description: "the meter's units minus the other count's, for this kind (negative: the other holds more)",
    }),
  },
  { additionalProperties: false },
)

export const ReconciliationEntry = Type.Object(
  {
    account_id: Type.String({ format: 'uuid' }),
    sub_account_id: Nullable(Type.String({ format: 'uuid', description: "null: the parent's own use" })),
    meter: Type.String(),
    meter_units: Units,
    limiter_units: Nullable(Type.Integer({ description: 'what limits charged; null when no limit charged any' })),
    log_units: Nullable(
      Type.Integer({
        description: "the request log's forwarded requests' units; null when the log no longer holds the range",
      }),
    ),
    exported_units: Type.Integer({
      description: 'acknowledged by the push receiver; with no push, what a pull of the closed periods gives',
    }),
    differences: Type.Array(ReconciliationDifference),
  },
  { additionalProperties: false },
)

// A sub-account's credits of a meter, over all their grants: what was burned, beside what the
// grants say went (docs/billing.md, Credits).
const CreditLedger = Type.Object(
  {
    sub_account_id: Type.String({ format: 'uuid' }),
    meter: Type.String(),
    granted_units: Units,
    left_units: Type.Integer({ description: 'left in live grants' }),
    expired_units: Type.Integer({ description: 'left in grants when they expired, or were voided: gone' }),
    debt_paid_units: Type.Integer({ description: 'what new grants paid of units used beyond every grant' }),
    burned_units: Type.Integer({
      description: "the units burned from the grants, as the export's `credits` carry them",
    }),
    unexplained_units: Type.Integer({
      description: 'granted − left − expired − debt paid − burned: 0 unless the ledger lost a burn',
    }),
  },
  { additionalProperties: false },
)

export const UsageReconciliation = Type.Object(
  {
    from: Type.String({ format: 'date-time' }),
    to: Type.String({ format: 'date-time' }),
    data: Type.Array(ReconciliationEntry),
    credits: Type.Array(CreditLedger, {
      description: "every credit ledger (sub-account and meter) of the parent's, over all its grants",
    }),
  },
  { additionalProperties: false },
)
