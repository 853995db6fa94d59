// TypeBox schemas of the usage export (docs/billing.md): its query, and the record it streams, for
// the OpenAPI document. The records are written by usage/export.ts, not by a serializer.
import { Type } from 'typebox'
import { Nullable } from './common.js'

export const UsageExportQuery = Type.Object(
  {
    from: Type.Optional(
      Type.String({
        maxLength: 64,
        description: 'RFC 3339, at the start of a usage period (inclusive); the start of this UTC month by default',
      }),
    ),
    to: Type.Optional(
      Type.String({
        maxLength: 64,
        description: 'RFC 3339, at the start of a usage period (exclusive); the end of the period under way by default',
      }),
    ),
    format: Type.Optional(
      Type.Union([Type.Literal('ndjson'), Type.Literal('csv')], {
        description: "`ndjson` (the default): a CloudEvent a line; `csv`: the events' data, with a header row",
      }),
    ),
  },
  { additionalProperties: false },
)

const Instant = Type.String({ format: 'date-time', description: 'seconds, no fraction: 2026-11-26T07:00:00Z' })
const Count = Type.Integer({ minimum: 0 })

export const UsageRecordData = Type.Object(
  {
    account_id: Type.String({ format: 'uuid' }),
    sub_account_id: Nullable(Type.String({ format: 'uuid', description: "null: the parent's own use" })),
    external_id: Nullable(Type.String()),
    meter: Type.String({
      description: "`requests` (request units: requests at their route's cost) or a reported meter",
    }),
    units: Count,
    requests: Count,
    period_start: Instant,
    period_end: Instant,
    late: Type.Boolean({
      description: 'some units were flushed after their own period closed, and counted in this one',
    }),
    credits: Type.Optional(
      Type.Array(
        Type.Object({ grant_id: Type.String({ format: 'uuid' }), units: Count }, { additionalProperties: false }),
        {
          description:
            "the units of this record burned from each of the sub-account's credit grants of the meter; absent when none was",
        },
      ),
    ),
  },
  { additionalProperties: false },
)

export const UsageEvent = Type.Object(
  {
    specversion: Type.Literal('1.0'),
    type: Type.Literal('com.tenancy-gateway.usage'),
    source: Type.String({ description: "the gateway's issuer (ISSUER_URL)" }),
    id: Type.String({ description: '<account>:<subject>:<meter>:<period start>, the same however often it is sent' }),
    time: Instant,
    subject: Type.String({ description: "the sub-account's id, or the account's for the parent's own use" }),
    datacontenttype: Type.Literal('application/json'),
    data: UsageRecordData,
  },
  { additionalProperties: false },
)
