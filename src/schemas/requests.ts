// TypeBox schemas of the request log (docs/api.md, Request log). The response schema is the
// serializer too: a record leaves with these fields and no other.
import { Type, type Static } from 'typebox'
import { Cursor, Limit, Nullable, STORABLE_TEXT } from './common.js'
import { UUID_PATTERN } from '../shared/identifiers.js'

/** A request id as the gateway keeps it (http/guards.ts: its own, or the client's sane one). */
export const REQUEST_ID_PATTERN = '^[A-Za-z0-9._:-]{1,128}$'

export const RequestsQuery = Type.Object(
  {
    sub_account_id: Type.Optional(
      Type.String({
        pattern: UUID_PATTERN,
        description: 'the tenant the request acted as (a sub-account, or the parent)',
      }),
    ),
    key_id: Type.Optional(Type.String({ pattern: UUID_PATTERN })),
    status: Type.Optional(
      Type.String({
        pattern: '^[1-5]([0-9]{2}|[xX]{2})$',
        description: 'a status (`404`) or a class (`4xx`)',
      }),
    ),
    code: Type.Optional(Type.String({ pattern: '^[a-z][a-z_]{0,63}$', description: 'the problem code of a refusal' })),
    route: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 200,
        pattern: STORABLE_TEXT,
        description: 'a route prefix of the route table, or `management`',
      }),
    ),
    since: Type.Optional(Type.String({ format: 'date-time', maxLength: 64, description: 'RFC 3339, inclusive' })),
    until: Type.Optional(Type.String({ format: 'date-time', maxLength: 64, description: 'RFC 3339, exclusive' })),
    limit: Limit,
    cursor: Type.Optional(Cursor),
  },
  { additionalProperties: false },
)

export const RequestParams = Type.Object(
  { id: Type.String({ pattern: REQUEST_ID_PATTERN, description: 'the request id (X-Request-Id)' }) },
  { additionalProperties: false },
)

export const RequestRecord = Type.Object(
  {
    id: Type.String({ description: 'the request id, as X-Request-Id gave it' }),
    time: Type.String({ format: 'date-time', description: 'when the request arrived' }),
    account_id: Type.String({ format: 'uuid', description: 'the parent account' }),
    tenant_id: Type.String({ format: 'uuid', description: 'the tenant the request acted as' }),
    key_id: Type.String({ format: 'uuid', description: 'the key that made it' }),
    method: Type.String(),
    route: Type.String({ description: 'the route prefix, or `management`' }),
    path: Type.String({ description: 'the path, never the query string' }),
    status: Type.Integer(),
    code: Nullable(Type.String({ description: 'the problem code of a refusal' })),
    duration_ms: Type.Number({ minimum: 0 }),
    request_bytes: Type.Integer({ minimum: 0, description: 'the body as declared (Content-Length)' }),
    response_bytes: Type.Integer({ minimum: 0 }),
    source_ip: Type.String(),
    cost: Type.Optional(
      Type.Integer({
        minimum: 1,
        description: "a proxied request's route cost: its request units if it was forwarded",
      }),
    ),
    units: Type.Optional(
      Type.Record(Type.String(), Type.Integer({ minimum: 0 }), {
        description: 'the units its upstream reported, by meter; absent when it reported none',
      }),
    ),
    would_refuse: Type.Optional(
      Type.Array(Type.String(), {
        description:
          'the shadow limits that would have refused it had they been enforced (it was not refused by them); absent when none would',
      }),
    ),
    outcome: Type.String({
      description:
        'how its exchange ended: `completed` (the answer went whole), `client_aborted` (the client left, reset, or was cut off for not reading, before the last byte), `upstream_aborted` (the upstream broke off its answer), `decided` (answered on AUTHZ_PORT for a proxy in front, which forwards it: its upstream answer unknown to the gateway); more values may come',
      examples: ['completed'],
    }),
    cell: Type.Optional(
      Type.String({
        description: 'the cell that served it, on a route with cells (docs/api.md, Cells); absent: none',
        examples: ['eu'],
      }),
    ),
    trace_id: Type.Optional(
      Type.String({
        pattern: '^[0-9a-f]{32}$',
        description:
          "its trace's id (W3C Trace Context), the trace a collector received with tracing on; absent when it was not traced",
        examples: ['4bf92f3577b34da6a3ce929d0e0e4736'],
      }),
    ),
  },
  { additionalProperties: false },
)
export type RequestRecord = Static<typeof RequestRecord>

export const RequestPage = Type.Object(
  { data: Type.Array(RequestRecord), next_cursor: Nullable(Type.String()) },
  { additionalProperties: false },
)
