// The compilers of the gateway's route schemas: Ajv validators for what a request sends, and
// fast-json-stringify serializers for what it is answered. fastify compiles every route's schemas
// as an app starts, though a replica serves few of the management routes it holds; here each
// schema is compiled when a request first needs it, and once per process (one app per replica,
// but a test process starts many).
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler'
import { Ajv, type Options as AjvOptions, type ValidateFunction } from 'ajv'
import addFormats from 'ajv-formats'

// Bodies are validated without coercion (a number is not a name); the query string and path
// are text, so there numbers and booleans are coerced. Unknown fields are errors, never dropped.
// `verbose` gives an error its schema, so that an unknown field's refusal can list the known ones.
const BASE_AJV: AjvOptions = {
  allErrors: true,
  removeAdditional: false,
  useDefaults: true,
  strict: false,
  verbose: true,
}

/** Exported for tests of the schemas, compiled as the app compiles them. */
export function makeAjv(coerceTypes: boolean): Ajv {
  const ajv = new Ajv({ ...BASE_AJV, coerceTypes })
  addFormats.default(ajv)
  return ajv
}

/** Made at the first compile: a process that serves no management route never builds Ajv. */
let ajvs: { body: Ajv; text: Ajv } | null = null
const validators = new Map<string, ValidateFunction>()

type RequestPart = 'body' | 'text'
const partOf = (httpPart: string | undefined): RequestPart => (httpPart === 'body' ? 'body' : 'text')

/**
 * The validator of a request part, compiled now (or before, in this process): the body's, or the
 * query string's, path's or headers' (text, coerced).
 */
export function compiledValidator(schema: unknown, httpPart: string | undefined): ValidateFunction {
  const part = partOf(httpPart)
  const key = `${part} ${JSON.stringify(schema)}`
  let compiled = validators.get(key)
  if (compiled === undefined) {
    ajvs ??= { body: makeAjv(false), text: makeAjv(true) }
    compiled = ajvs[part].compile(schema as object)
    validators.set(key, compiled)
  }
  return compiled
}

/**
 * The validator fastify holds for a route: compiledValidator's at its first call. What fastify
 * reads of a validator (`errors` after a call, `schemaEnv` to pass the parent in) is the compiled one's.
 */
export function validatorFor(schema: unknown, httpPart: string | undefined): ValidateFunction {
  let compiled: ValidateFunction | undefined
  const compile = () => {
    compiled ??= compiledValidator(schema, httpPart)
    return compiled
  }
  const validate = ((data: unknown, context?: unknown) =>
    (compile() as (data: unknown, context?: unknown) => boolean)(data, context)) as ValidateFunction
  Object.defineProperties(validate, {
    errors: { get: () => compiled?.errors ?? null },
    schemaEnv: { get: () => compile().schemaEnv },
  })
  return validate
}

type Serializer = (data: unknown) => string
const buildSerializer = SerializerSelector()({}, {})
const serializers = new Map<string, Serializer>()

/** The serializer of an answer's body by its schema, compiled now (or before, in this process). */
export function compiledSerializer(schema: unknown): Serializer {
  const key = JSON.stringify(schema)
  let compiled = serializers.get(key)
  if (compiled === undefined) {
    compiled = buildSerializer({ schema } as Parameters<typeof buildSerializer>[0]) as Serializer
    serializers.set(key, compiled)
  }
  return compiled
}

/** The serializer fastify holds for an answer: compiledSerializer's at its first call. */
export function serializerFor(schema: unknown): Serializer {
  let compiled: Serializer | undefined
  return (data) => {
    compiled ??= compiledSerializer(schema)
    return compiled(data)
  }
}
