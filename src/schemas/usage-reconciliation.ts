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

export const UsageReconciliation = Type.Object(
  {
    from: Type.String({ format: 'date-time' }),
    to: Type.String({ format: 'date-time' }),
    data: Type.Array(ReconciliationEntry),
  },
  { additionalProperties: false },
)
