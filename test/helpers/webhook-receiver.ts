// A webhook receiver on 127.0.0.1, port 0: records every delivery (its webhook-id, headers and
// body, verified with the `standardwebhooks` package, not the gateway's code) and answers as the
// test says, by default 200.
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http'
import { Webhook } from 'standardwebhooks'
import type { JsonBody } from './json.js'
import type { TestLike } from './test-like.js'
import { listenOnLoopback } from './upstream.js'

export interface Delivery {
  id: string
  headers: IncomingHttpHeaders
  body: string
  /** The payload as `standardwebhooks` verified it, or null when the signature did not verify. */
  verified: JsonBody | null
  receivedAt: number
}

export type ReceiverHandler = (delivery: Delivery, response: ServerResponse, request: IncomingMessage) => void

export interface Receiver {
  url: string
  deliveries: Delivery[]
  /** How many times each webhook-id arrived. */
  countsById(): Map<string, number>
  /** Sets the secret signatures are verified with (known once the endpoint is made). */
  secret(value: string): void
  /** The secret last set. */
  secretValue(): string
  answer(handler: ReceiverHandler): void
}

export const answerOk: ReceiverHandler = (_delivery, response) => response.writeHead(200).end('ok')

export async function startReceiver(t: TestLike, path = '/hooks'): Promise<Receiver> {
  const deliveries: Delivery[] = []
  let verifier: Webhook | null = null
  let secret = ''
  let handler = answerOk
  const server = createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8')
      let verified: JsonBody | null = null
      try {
        verified = verifier?.verify(body, request.headers as Record<string, string>) ?? null
      } catch {
        verified = null
      }
      const delivery = {
        id: String(request.headers['webhook-id']),
        headers: request.headers,
        body,
        verified,
        receivedAt: Date.now(),
      }
      deliveries.push(delivery)
      handler(delivery, response, request)
    })
  })
  const { port } = await listenOnLoopback(t, server)
  return {
    url: `http://127.0.0.1:${port}${path}`,
    deliveries,
    countsById() {
      const counts = new Map<string, number>()
      for (const { id } of deliveries) counts.set(id, (counts.get(id) ?? 0) + 1)
      return counts
    },
    secretValue: () => secret,
    secret(value) {
      secret = value
      verifier = new Webhook(value.slice('whsec_'.length))
    },
    answer(next) {
      handler = next
    },
  }
}
