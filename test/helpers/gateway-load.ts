// Driving gateway replicas in the limits tests over real sockets: a client that offers requests at
// a pace without waiting for the answers, and the instants each replica's limiter admitted at.
import { Agent } from 'node:http'
import type { FastifyInstance } from 'fastify'
import { callAs } from './http.js'
import { getOverAgent } from './http.js'
import { preciseNow } from './limits.js'
import { sleep } from './poll.js'
import type { TestLike } from './test-like.js'

export interface Answer {
  /** Which replica (index) it was sent to. */
  replica: number
  /** When it was sent and answered (preciseNow ms). */
  sentAt: number
  answeredAt: number
  status: number
  /** The problem's code of a refusal. */
  code: string | null
}

/** A keep-alive agent per replica, destroyed at teardown. */
export function agents(t: TestLike, count: number): Agent[] {
  return Array.from({ length: count }, () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 64 })
    t.teardown(() => agent.destroy())
    return agent
  })
}

async function send(
  url: string,
  agent: Agent,
  path: string,
  headers: Record<string, string>,
  replica: number,
): Promise<Answer> {
  const sentAt = preciseNow()
  const res = await getOverAgent(url, agent, path, headers)
  let code: string | null = null
  if (res.status >= 400) {
    try {
      code = JSON.parse(res.body.toString('utf8')).code ?? null
    } catch {}
  }
  return { replica, sentAt, answeredAt: preciseNow(), status: res.status, code }
}

/**
 * Offers `perSecond` GETs of `path` a second for `ms`, the i-th to replica `pick(i)`, without
 * waiting for answers (so several are in flight at once); resolves with every answer.
 */
export async function offerOverSockets(options: {
  urls: readonly string[]
  agents: readonly Agent[]
  perSecond: number
  ms: number
  pick: (i: number) => number
  path: string
  headers: Record<string, string>
}): Promise<{ answers: Answer[]; start: number }> {
  const { urls, perSecond, ms, pick, path, headers } = options
  const start = preciseNow()
  const pending: Promise<Answer>[] = []
  for (;;) {
    const elapsed = preciseNow() - start
    if (elapsed >= ms) break
    const due = Math.floor((elapsed * perSecond) / 1000)
    while (pending.length < due) {
      const replica = pick(pending.length)
      pending.push(send(urls[replica]!, options.agents[replica]!, path, headers, replica))
    }
    await sleep(2)
  }
  return { answers: await Promise.all(pending), start }
}

/**
 * Records the instants `app`'s limiter admitted a request under `policy` at, as the gateway saw
 * them (the upstream sees them a socket later). Wraps the instance's `admit`; nothing else changes.
 */
export function recordAdmissions(app: FastifyInstance, policy: string): number[] {
  const admitted: number[] = []
  const limiter = app.limiter
  const admit = limiter.admit.bind(limiter)
  limiter.admit = (subjects) => {
    const decision = admit(subjects)
    if (decision.allowed && decision.policies.some((p) => p.name === policy)) admitted.push(preciseNow())
    return decision
  }
  return admitted
}

/** A sub-account of `parentKey`'s parent, made through the API of the gateway at `url`. */
export async function subAccountVia(url: string, parentKey: string, name: string, limits?: unknown): Promise<string> {
  const res = await callAs(url, parentKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name, ...(limits === undefined ? {} : { limits }) },
  })
  if (res.status !== 201) throw new Error(`create ${name}: ${res.status} ${res.body}`)
  return res.json().id as string
}

/** The parent's key and acting header as `getOverAgent` takes them. */
export const actingHeaders = (apiKey: string, acting: string): Record<string, string> => ({
  authorization: `Bearer ${apiKey}`,
  'x-service-acting-tenant': acting,
})
