// GitHub's secret scanning partner endpoint (docs/secret-scanning.md): a report of tokens in our
// format found in public, signed by GitHub. The signature is checked over the body's bytes as they
// came, before anything is read from them: an unsigned or wrongly signed report is 401 and changes
// nothing. Each live key of ours then gets its account's leak_policy (auth/key-leaks.ts), and the
// answer is GitHub's feedback: a true positive for each key of ours, live or not.
import type { FastifyPluginAsync } from 'fastify'
import { type LeakReport, reportLeaks } from '../auth/key-leaks.js'
import type { CacheInvalidator } from '../cache/index.js'
import { ApiError, unsupportedMediaType, validationFailed } from '../errors.js'
import { addManagementDeadline, outsideStoreDeadline } from '../management/hooks.js'
import { GITHUB_REPORT_MAX_TOKENS, GitHubFeedback } from '../schemas/key-leaks.js'
import { SECRET_SCANNING_GITHUB_PATH } from '../shared/paths.js'
import type { Sql } from '../store/db.js'
import type { GitHubKeys } from './github-keys.js'

/** A report of 10,000 tokens, each with its URL, stays well within this. */
const REPORT_BODY_LIMIT = 8 * 1024 * 1024

export interface SecretScanningOptions {
  sql: Sql
  cache: CacheInvalidator
  keys: GitHubKeys
  bodyTimeoutMs?: number | undefined
}

const unsigned = (detail: string) => new ApiError('signature_invalid', detail)

/** The one value of a header, or null when it is absent or sent twice. */
function single(value: string | string[] | undefined): string | null {
  return typeof value === 'string' && value !== '' ? value : null
}

/** The report's tokens, or a 400 saying what is wrong (checked once the signature holds). */
function reportOf(body: Buffer): { type: string; report: LeakReport; source: string | null }[] {
  let value: unknown
  try {
    value = JSON.parse(body.toString('utf8'))
  } catch {
    throw new ApiError('invalid_json', 'the report must be a JSON array of {token, type, url, source}')
  }
  if (!Array.isArray(value)) throw validationFailed([{ path: '/body', message: 'must be an array' }])
  if (value.length > GITHUB_REPORT_MAX_TOKENS)
    throw validationFailed([{ path: '/body', message: `must hold at most ${GITHUB_REPORT_MAX_TOKENS} tokens` }])
  return value.map((item: unknown, i) => {
    const { token, type, url, source } = (item ?? {}) as Record<string, unknown>
    if (typeof token !== 'string' || typeof type !== 'string')
      throw validationFailed([{ path: `/body/${i}`, message: 'must have a token and a type, both strings' }])
    return {
      type,
      report: { token, url: typeof url === 'string' ? url : null },
      source: typeof source === 'string' ? source : null,
    }
  })
}

export const secretScanningRoutes: FastifyPluginAsync<SecretScanningOptions> = async (scope, options) => {
  scope.removeAllContentTypeParsers()
  scope.addContentTypeParser(
    'application/json',
    { parseAs: 'buffer', bodyLimit: REPORT_BODY_LIMIT },
    (_request, body, done) => done(null, body),
  )
  scope.addContentTypeParser('*', (request, _payload, done) =>
    done(unsupportedMediaType('application/json', request.headers['content-type']), undefined),
  )
  addManagementDeadline(scope, options.bodyTimeoutMs)

  scope.post(
    SECRET_SCANNING_GITHUB_PATH,
    {
      schema: {
        operationId: 'reportGitHubSecretScanning',
        summary: "GitHub's secret scanning report of leaked keys",
        description:
          "Signed by GitHub (ECDSA P-256 in `Github-Public-Key-Signature`, under `Github-Public-Key-Identifier`, one of the keys at SECRET_SCANNING_KEYS_URL). Each live key reported gets its account's `leak_policy` at once. The answer is GitHub's feedback: `true_positive` for a key of the gateway's, live or not.",
        tags: ['secret-scanning'],
        response: { 200: GitHubFeedback },
      },
    },
    async (request, reply) => {
      const identifier = single(request.headers['github-public-key-identifier'])
      const signature = single(request.headers['github-public-key-signature'])
      if (identifier === null || signature === null)
        throw unsigned(
          'a report must be signed: Github-Public-Key-Identifier and Github-Public-Key-Signature, once each',
        )
      const body = request.body
      if (!Buffer.isBuffer(body)) throw unsigned('a report has a body, and its signature is over it')
      // The keys may be fetched from GitHub: not the store's time.
      const verified = await outsideStoreDeadline(request, reply, () =>
        options.keys.verify(body, identifier, signature),
      )
      if (!verified) throw unsigned("the report's signature does not verify with GitHub's key of that identifier")
      const items = reportOf(body)
      const outcome = await reportLeaks(
        {
          sql: options.sql,
          cache: options.cache,
          origin: { actor: { type: 'gateway', key_id: null }, requestId: request.id, sourceIp: request.ip },
          source: 'github',
          accountId: null,
          sources: items.map((i) => i.source),
        },
        items.map((i) => i.report),
      )
      return items.map((item, i) => ({
        token_raw: item.report.token,
        token_type: item.type,
        label: outcome.known[i] ? 'true_positive' : 'false_positive',
      }))
    },
  )
}
