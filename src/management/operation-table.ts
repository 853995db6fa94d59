// Routes as data: each operation of an API is one entry of its resource's table (method, path,
// schema, the route's config, its handler), and a scope registers its tables with one loop, in
// their order (the order of the OpenAPI document). The management API, the portal's API and its
// session exchange are registered this way; what a caller must hold is in each entry's `config`
// (a management scope, a portal permission), read by a hook of the scope.
import type { IncomingMessage, ServerResponse } from 'node:http'
import type {
  ContextConfigDefault,
  FastifyContextConfig,
  FastifyInstance,
  FastifyRequest,
  FastifySchema,
  RawServerDefault,
  RouteGenericInterface,
  RouteHandlerMethod,
  RouteOptions,
} from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'

type TypedHandler<S extends FastifySchema> = RouteHandlerMethod<
  RawServerDefault,
  IncomingMessage,
  ServerResponse,
  RouteGenericInterface,
  ContextConfigDefault,
  S,
  TypeBoxTypeProvider
>

/** The request of an operation whose schema is `S`: its params, query and body typed from it. */
export type OperationRequest<S extends FastifySchema> = Parameters<TypedHandler<S>>[0]
/** The reply of an operation whose schema is `S`: `send` typed by the status's response schema. */
export type OperationReply<S extends FastifySchema> = Parameters<TypedHandler<S>>[1]

/** A hook of one route, built from the scope's context when the table is registered. */
type RouteHook<C> = (context: C) => (request: FastifyRequest) => Promise<void>

/** One operation: a route, and the plain function that answers it, given the scope's context `C`. */
export interface Operation<C, S extends FastifySchema = FastifySchema> {
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE'
  /** Under the scope's prefix. */
  url: string
  schema: S
  /** The route's config: what its caller must hold (`scope`, `permission`), read by the scope's hooks. */
  config?: FastifyContextConfig
  /** The route's own body limit, when not its scope's (a streamed body). */
  bodyLimit?: number
  /** A route-level onRequest hook, after the scope's own. */
  onRequest?: RouteHook<C>
  /** A route-level preValidation hook, after the scope's own. */
  preValidation?: (request: OperationRequest<S>) => Promise<void>
  handler(request: OperationRequest<S>, reply: OperationReply<S>, context: C): Promise<unknown>
}

/** A table of operations of one scope, whatever each one's schema. */
// biome-ignore lint/suspicious/noExplicitAny: each entry's schema is its own; `defineOperation` typed it.
export type OperationTable<C> = readonly Operation<C, any>[]

/** An operation of a scope whose context is `C`, its request and reply typed from its schema. */
export const defineOperation =
  <C>() =>
  <S extends FastifySchema>(operation: Operation<C, S>): Operation<C, S> =>
    operation

/** Registers every operation of `table` on `scope`, in order, each handler given `context`. */
export function registerOperations<C>(scope: FastifyInstance, table: OperationTable<C>, context: C): void {
  for (const operation of table) {
    const route: RouteOptions = {
      method: operation.method,
      url: operation.url,
      schema: operation.schema,
      handler: (request, reply) => operation.handler(request, reply, context),
    }
    if (operation.config !== undefined) route.config = operation.config
    if (operation.bodyLimit !== undefined) route.bodyLimit = operation.bodyLimit
    if (operation.onRequest !== undefined) route.onRequest = operation.onRequest(context)
    if (operation.preValidation !== undefined) route.preValidation = operation.preValidation
    scope.route(route)
  }
}
