// How bodies and parameters are read on the gateway's own routes (management, ops): their
// schemas' compilers (schema-compilers.ts) and the content-type parsers. Proxied routes replace
// the parsers with a stream of their own (proxy/plugin.ts).
import { isUtf8 } from 'node:buffer'
import fp from 'fastify-plugin'
import { ApiError, unsupportedMediaType } from '../errors.js'
import { findJsonSyntaxError } from './json-error.js'
import { serializerFor, validatorFor } from './schema-compilers.js'

/**
 * The 400 of a body the JSON parser refused: where it stops being JSON, or, when its syntax is
 * fine, the prototype keys the parser refuses (docs/api.md).
 */
function invalidJson(body: string): ApiError {
  const syntax = findJsonSyntaxError(body)
  if (syntax === null)
    return new ApiError(
      'invalid_json',
      'the body must be JSON without "__proto__" or "constructor": "prototype" keys, which the gateway refuses',
    )
  return new ApiError(
    'invalid_json',
    `the body must be JSON: at line ${syntax.line}, column ${syntax.column}, ${syntax.reason}`,
  )
}

/**
 * The 400 of a body that is not UTF-8. JSON is UTF-8 (RFC 8259), whatever charset a client's type
 * names: decoded as it was, a byte that is not became U+FFFD and was stored so.
 */
function notUtf8(): ApiError {
  return new ApiError('invalid_json', 'the body must be JSON in UTF-8: it holds bytes that are not UTF-8')
}

export const parsing = fp(
  async (app) => {
    app.setValidatorCompiler(({ schema, httpPart }) => validatorFor(schema, httpPart))
    app.setSerializerCompiler(({ schema }) => serializerFor(schema))

    // JSON only, and a POST without a body is fine with or without a JSON content type (docs/api.md).
    app.removeAllContentTypeParsers()
    const parseJson = app.getDefaultJsonParser('error', 'error')
    app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, bytes, done) => {
      if (!isUtf8(bytes as Buffer)) return done(notUtf8(), undefined)
      const body = (bytes as Buffer).toString('utf8')
      if (body === '') return done(null, undefined)
      parseJson(request, body, (err, value) => {
        if (err) return done(invalidJson(body), undefined)
        done(null, value)
      })
    })

    // `curl -X POST -d ''` sends a form content type with no body, and Node's http.request an
    // empty chunked one without a type: nothing to parse, so accept both. A body of any other type
    // is refused at its first byte.
    app.addContentTypeParser('*', (request, payload, done) => {
      const unsupported = () => unsupportedMediaType('application/json', request.headers['content-type'])
      if (request.headers['content-length'] === '0') return done(null, undefined)
      if (request.headers['content-length'] !== undefined) return done(unsupported(), undefined)
      let settled = false
      const settle = (err: Error | null) => {
        if (settled) return
        settled = true
        payload.removeAllListeners('data')
        done(err, undefined)
      }
      payload.on('data', () => settle(unsupported()))
      payload.once('end', () => settle(null))
      payload.once('error', (err: Error) => settle(err))
    })
  },
  { name: 'parsing' },
)
