// TypeBox schema of the proxied routes' list (docs/api.md, Routes): GET /v1/sub-accounts/routes.
import { Type } from 'typebox'
import { Nullable } from './common.js'

const ScopeList = Type.Array(Type.String())

export const TargetView = Type.Object(
  {
    position: Type.Integer({ minimum: 1, description: "the target's place in the route's targets, from 1" }),
    weight: Type.Integer({ minimum: 1, maximum: 1000 }),
    cell: Nullable(Type.String({ description: 'the cell the target serves; null on a route without cells' })),
    state: Type.Union([Type.Literal('up'), Type.Literal('ejected'), Type.Literal('failing_checks')], {
      description:
        'up: takes requests; ejected: taken out by passive health after failures in a row; failing_checks: taken out by its active health checks',
    }),
  },
  { additionalProperties: false },
)

export const RouteStatus = Type.Object(
  {
    prefix: Type.String(),
    public: Type.Boolean({ description: 'no key needed' }),
    scopes: Type.Object({ read: ScopeList, write: ScopeList }, { additionalProperties: false }),
    websocket: Type.Boolean({ description: 'WebSocket upgrades proxied' }),
    cors: Nullable(
      Type.Object(
        {
          origins: Type.Array(Type.String(), { description: 'origins whose pages may call the route; ["*"]: any' }),
          credentials: Type.Boolean(),
        },
        { additionalProperties: false },
      ),
    ),
    balance: Type.Union(
      [
        Type.Literal('upstream'),
        Type.Literal('cells'),
        Type.Literal('least_request'),
        Type.Literal('round_robin'),
        Type.Literal('tenant_hash'),
      ],
      {
        description:
          'upstream: one upstream, not watched (no targets listed); cells: cells alone, each balancing its own targets; else how its targets are balanced',
      },
    ),
    targets: Type.Array(TargetView, { description: "each target's state on the replica that answers" }),
    panic: Type.Boolean({ description: 'every target is out: requests go to all of them' }),
  },
  { additionalProperties: false },
)

export const RouteList = Type.Object({ data: Type.Array(RouteStatus) }, { additionalProperties: false })
