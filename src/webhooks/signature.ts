// Standard Webhooks signatures: `v1,` + base64 HMAC-SHA256 of "id.timestamp.body", keyed with the
// base64-decoded part of the secret after `whsec_`; secrets are 32 random bytes.
import { createHmac, randomBytes } from 'node:crypto'

export const SECRET_PREFIX = 'whsec_'

/** A new endpoint secret: `whsec_` + base64 of 32 random bytes. */
export function generateWebhookSecret(): string {
  return SECRET_PREFIX + randomBytes(32).toString('base64')
}

/** The key a secret stands for; refuses anything but `whsec_` + base64. */
export function secretKey(secret: string): Buffer {
  const encoded = secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : ''
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) throw new Error('a webhook secret is whsec_ followed by base64')
  return Buffer.from(encoded, 'base64')
}

/** The `webhook-signature` header value for one message. */
export function signWebhook(secret: string, id: string, timestampSeconds: number, body: string): string {
  const mac = createHmac('sha256', secretKey(secret)).update(`${id}.${timestampSeconds}.${body}`).digest('base64')
  return `v1,${mac}`
}

/**
 * The sealed secret's associated data: a sealed secret copied onto another endpoint's row does not
 * open (sealed under ENCRYPTION_KEY when the endpoint is made, opened by the delivery worker).
 */
export const sealedSecretFor = (endpointId: string) => `webhook_endpoint:${endpointId}`
