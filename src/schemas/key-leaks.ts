// TypeBox schemas of leaked keys (docs/secret-scanning.md): the account's settings (its
// leak_policy), a parent's report of one of its keys, and GitHub's secret scanning report and the
// feedback answered to it.
import { Type } from 'typebox'
import { ApiKey } from './keys.js'

export const ReportLeakBody = Type.Object(
  { key: Type.String({ minLength: 1, maxLength: 1024, description: 'the key found where it should not be' }) },
  { additionalProperties: false },
)

/** The key reported, as it now is, and its sub-account (null for the account's own key). */
export const LeakedKey = Type.Object(
  {
    ...ApiKey.properties,
    sub_account_id: Type.Union([Type.String({ format: 'uuid' }), Type.Null()]),
  },
  { additionalProperties: false },
)

/** At most this many tokens in one report of GitHub's. */
export const GITHUB_REPORT_MAX_TOKENS = 10_000

/** A report's body, for the OpenAPI document (it is checked by secret-scanning/report.ts, once its signature is). */
export const GitHubReport = Type.Array(
  Type.Object({
    token: Type.String(),
    type: Type.String(),
    url: Type.Optional(Type.String()),
    source: Type.Optional(Type.String()),
  }),
  { maxItems: GITHUB_REPORT_MAX_TOKENS },
)

export const GitHubFeedback = Type.Array(
  Type.Object(
    {
      token_raw: Type.String(),
      token_type: Type.String(),
      label: Type.Union([Type.Literal('true_positive'), Type.Literal('false_positive')]),
    },
    { additionalProperties: false },
  ),
)
