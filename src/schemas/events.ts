// TypeBox schemas of the audit log (docs/api.md, Audit log; docs/events.md): an event as shown
// (its actor named with `expand=actor`), a page of them, the list's query and one event's path.
// The response schemas are the serializers too.
import { Type, type Static } from 'typebox'
import { Cursor, Limit, Nullable, Page, STORABLE_TEXT, Timestamp } from './common.js'
import { UUID_PATTERN } from '../shared/identifiers.js'

// `data.object` and `data.previous` are the API's own objects, described in docs/events.md for each type.
const AnyObject = Type.Unsafe<Record<string, unknown>>({ type: 'object', additionalProperties: true })

export const Event = Type.Object(
  {
    id: Type.String({ pattern: '^evt_[0-9A-HJKMNP-TV-Z]{26}$', description: '`evt_` and a ULID' }),
    type: Type.String({ description: 'docs/events.md lists the types' }),
    created_at: Timestamp,
    account_id: Type.String({ format: 'uuid', description: 'the parent account' }),
    actor: Type.Object(
      {
        type: Type.Union([
          Type.Literal('api_key'),
          Type.Literal('operator'),
          Type.Literal('gateway'),
          Type.Literal('portal_session'),
          Type.Literal('plan'),
        ]),
        key_id: Nullable(
          Type.String({
            description: 'the calling key; null for the operator (CLI), the gateway (alerts) and a portal session',
          }),
        ),
        id: Type.Optional(Type.String({ description: 'a portal session: its id' })),
        // Only with `expand=actor` (docs/api.md, Audit log): who the actor is, as the store has it now.
        name: Type.Optional(
          Nullable(Type.String({ description: 'with expand=actor, a key: its name (null when no longer found)' })),
        ),
        prefix: Type.Optional(
          Nullable(Type.String({ description: 'with expand=actor, a key: its prefix (null when no longer found)' })),
        ),
        sub_account_id: Type.Optional(
          Nullable(
            Type.String({
              description:
                "with expand=actor, a portal session: the sub-account it was made for; a key: its sub-account's id, null for the parent's own key",
            }),
          ),
        ),
      },
      { additionalProperties: false },
    ),
    target: Type.Object(
      {
        type: Type.Union([
          Type.Literal('sub_account'),
          Type.Literal('api_key'),
          Type.Literal('account'),
          Type.Literal('webhook_endpoint'),
          Type.Literal('portal_session'),
          Type.Literal('credit_grant'),
        ]),
        id: Type.String(),
      },
      { additionalProperties: false },
    ),
    request_id: Nullable(Type.String()),
    source_ip: Nullable(Type.String({ description: 'the client address; null for the operator (CLI) and alerts' })),
    data: Type.Object(
      {
        object: AnyObject,
        previous: Nullable(AnyObject),
        shadow: Type.Optional(
          Type.Literal(true, {
            description: 'an alert of a shadow limit: what it would have refused, had it been enforced',
          }),
        ),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
)
export type Event = Static<typeof Event>

export const EventPage = Page(Event)

// Not validated here: an id that is not an event id is a 404, as for the other resources.
export const EventParams = Type.Object({ event_id: Type.String() })

export const EventsQuery = Type.Object(
  {
    type: Type.Optional(
      Type.String({ pattern: '^[a-z_]{1,40}\\.([a-z_]{1,40}|\\*)$', description: 'an event type, or `<resource>.*`' }),
    ),
    target_id: Type.Optional(Type.String({ minLength: 1, maxLength: 200, pattern: STORABLE_TEXT })),
    sub_account_id: Type.Optional(
      Type.String({
        pattern: UUID_PATTERN,
        description: "a sub-account's events: those of the sub-account itself, of its keys and of its portal sessions",
      }),
    ),
    expand: Type.Optional(
      Type.Literal('actor', { description: '`actor`: each actor also carries its name, prefix or sub-account' }),
    ),
    since: Type.Optional(Type.String({ format: 'date-time', maxLength: 64, description: 'RFC 3339, inclusive' })),
    until: Type.Optional(Type.String({ format: 'date-time', maxLength: 64, description: 'RFC 3339, exclusive' })),
    limit: Limit,
    cursor: Type.Optional(Cursor),
  },
  { additionalProperties: false },
)
