// Verifying a tenancy-gateway webhook by hand, with node:crypto only (the `standardwebhooks`
// package does the same). `body` is the raw request body, as bytes or a string, before any JSON
// parsing; `secret` is the endpoint's `whsec_…`. Returns the parsed payload, or throws.
import { createHmac, timingSafeEqual } from 'node:crypto'

const TOLERANCE_SECONDS = 5 * 60

export function verifyWebhook(secret, headers, body) {
  const id = headers['webhook-id']
  const timestamp = headers['webhook-timestamp']
  const signatures = headers['webhook-signature']
  if (!id || !timestamp || !signatures) throw new Error('not a webhook: headers missing')
  // A replayed message is refused: the timestamp is signed, so it cannot be moved.
  if (Math.abs(Date.now() / 1000 - Number(timestamp)) > TOLERANCE_SECONDS) throw new Error('too old or too new')
  const key = Buffer.from(secret.slice('whsec_'.length), 'base64')
  const expected = createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest()
  // The header may hold several space-separated signatures (`v1,<base64>`); one must match.
  const matches = signatures.split(' ').some((entry) => {
    const [version, signature] = entry.split(',')
    const given = Buffer.from(signature ?? '', 'base64')
    return version === 'v1' && given.length === expected.length && timingSafeEqual(given, expected)
  })
  if (!matches) throw new Error('the signature does not match')
  return JSON.parse(body.toString())
}
