// The token endpoint's body: application/x-www-form-urlencoded only (RFC 6749 §3.2, §4.4.2),
// read with URLSearchParams once its encoding has been checked, since URLSearchParams itself
// never fails: it leaves a broken percent-encoding as it is and turns bytes that are not UTF-8
// into U+FFFD, which would reach the checks as a different value than the client sent.
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { contentTypeSent } from '../errors.js'
import { invalidRequest } from './errors.js'

/** A token request is a few hundred bytes: a body past this is not one. */
export const TOKEN_BODY_LIMIT = 4 * 1024

export const FORM_TYPE = 'application/x-www-form-urlencoded'

/** The parameters of a form, each sent once (RFC 6749 §3.2); no prototype, so any name is plain data. */
export type TokenForm = Readonly<Record<string, string>>

const utf8 = new TextDecoder('utf-8', { fatal: true })

/** The charsets a form may declare: its bytes are UTF-8 (RFC 6749 Appendix B); ASCII is a subset. */
const CHARSETS = new Set(['utf-8', 'utf8', 'us-ascii'])

function declaredCharset(contentType: string | undefined): string | null {
  const match = /;\s*charset\s*=\s*(?:"([^"]*)"|([^;\s]*))/i.exec(contentType ?? '')
  return match === null ? null : (match[1] ?? match[2] ?? '').toLowerCase()
}

/** Decodes a form's text, or throws 400 invalid_request; exported for the unit tests. */
export function parseTokenForm(body: Buffer, contentType?: string): TokenForm {
  const charset = declaredCharset(contentType)
  if (charset !== null && !CHARSETS.has(charset))
    throw invalidRequest(`the form must be UTF-8; charset=${charset.slice(0, 40)} is not accepted`)
  let text: string
  try {
    text = utf8.decode(body)
  } catch {
    throw invalidRequest('the body is not UTF-8')
  }
  // Every name and value must decode: a `%` not followed by two hex digits, or escapes that are
  // not UTF-8, are refused rather than read as something else. `+` is a space (WHATWG URL §5.1).
  for (const part of text.split('&')) {
    try {
      decodeURIComponent(part.replaceAll('+', ' '))
    } catch {
      throw invalidRequest('the body is not a valid form: a percent-encoding is broken or not UTF-8')
    }
  }
  const form: Record<string, string> = Object.create(null)
  for (const [name, value] of new URLSearchParams(text)) {
    if (Object.hasOwn(form, name)) throw invalidRequest(`the parameter ${quoted(name)} is sent more than once`)
    form[name] = value
  }
  return form
}

/**
 * A value the client sent, in a description: cut short, in single quotes, since RFC 6749 §5.2
 * allows no '"' there (OAuthError replaces whatever else it does not allow).
 */
export function quoted(name: string): string {
  return `'${name.slice(0, 40)}'`
}

/**
 * The scope's body parsers: forms, read whole up to TOKEN_BODY_LIMIT; any other type (JSON
 * included) is a 400 invalid_request at once, as RFC 6749 wants a form.
 */
export function acceptFormsOnly(scope: FastifyInstance): void {
  scope.removeAllContentTypeParsers()
  scope.addContentTypeParser(
    FORM_TYPE,
    { parseAs: 'buffer', bodyLimit: TOKEN_BODY_LIMIT },
    (request: FastifyRequest, body: Buffer | string, done) => {
      try {
        done(null, parseTokenForm(body as Buffer, request.headers['content-type']))
      } catch (err) {
        done(err as Error, undefined)
      }
    },
  )
  scope.addContentTypeParser('*', (request, _payload, done) => {
    done(
      invalidRequest(`the body must be ${FORM_TYPE}; it came with ${contentTypeSent(request.headers['content-type'])}`),
      undefined,
    )
  })
}
