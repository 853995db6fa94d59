// Idempotency keys on the management API's writes (docs/api.md, Idempotency). A POST or PATCH with
// an Idempotency-Key claims (calling key id, Idempotency-Key) in Postgres once authentication, the
// acting rules, the authorization and the management rate have passed and the body has arrived;
// the claim's insert conflicts on the primary key, so among requests on any replica one runs and
// the others are answered from what it leaves: its kept answer (`Idempotent-Replayed: true`),
// 409 idempotency_key_in_flight while it runs, 422 idempotency_key_reused for another request.
// The answer is kept 24 h, its body sealed under ENCRYPTION_KEY (a mint's or a roll's carries the
// key and its client secret); a 400 or a 5xx is not kept, so that a retry runs again, unless the
// change committed all the same (the change's transaction marks the claim's row; events/record.ts):
// then a retry is 409 idempotency_answer_lost, and nothing is made twice.
import { randomUUID } from 'node:crypto'
import type { FastifyInstance, FastifyReply, FastifyRequest, RequestPayload } from 'fastify'
import { open, seal } from '../encryption/seal.js'
import { ApiError } from '../errors.js'
import { type Sql, withDeadline } from '../store/db.js'
import {
  claimIdempotencyKey as claimSlot,
  type IdempotencySlot,
  keepIdempotentAnswer as keepAnswer,
  type KeptAnswer,
  releaseIdempotencyKey,
} from '../store/idempotency.js'
import { storeDeadlinesOf } from '../store/deadlines.js'
import { answeredByStoreDeadline, hasBody, stopStoreDeadline } from './hooks.js'
import { Fingerprint, IDEMPOTENT_METHODS, idempotencyKeyOf, REPLAYED_HEADER } from './idempotency-request.js'
import { IdempotencySweep } from './idempotency-sweep.js'

/** How long an answer is kept. */
export const IDEMPOTENCY_KEEP_SECONDS = 24 * 60 * 60
/**
 * How long a claim may go unanswered before a request with the same fingerprint takes it over:
 * its replica died mid-way. Far past anything a live request can take (a management call's store
 * work is cut at 1.5 s, its body at 10 s, and the body is read before the claim).
 */
export const IDEMPOTENCY_STALE_CLAIM_SECONDS = 60

/** The answer headers that are kept and replayed; the others belong to each request. */
const KEPT_HEADERS = ['location', 'content-type', 'cache-control'] as const

export interface IdempotencyOptions {
  sql: Sql
  /** ENCRYPTION_KEY: kept bodies are sealed under it. */
  encryptionKey: Buffer
  /** How often expired rows are deleted (default 60 s). */
  sweepIntervalMs?: number | undefined
}

interface IdempotentRequest {
  slot: IdempotencySlot
  fingerprint: Fingerprint
  /** Set once the slot is this request's to run. */
  claim: string | null
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The request's Idempotency-Key, its fingerprint and its claim (management/idempotency.ts). */
    idempotency: IdempotentRequest | null
  }
}

/** The sealed body's associated data: a body copied onto another row does not open. */
const sealedFor = (slot: IdempotencySlot) => `idempotency:${slot.keyId}:${slot.idempotencyKey}`

/** A status whose answer is kept: not a 400 (the request can be fixed) nor a 5xx (it can be retried). */
const isKept = (status: number) => status !== 400 && status < 500

function replay(reply: FastifyReply, slot: IdempotencySlot, answer: KeptAnswer, key: Buffer): FastifyReply {
  const body = open(key, answer.sealedBody, sealedFor(slot), 'a kept idempotent answer')
  return reply.code(answer.status).headers(answer.headers).header(REPLAYED_HEADER, 'true').send(body)
}

function payloadBytes(payload: unknown): Buffer | null {
  if (payload === null || payload === undefined) return Buffer.alloc(0)
  if (typeof payload === 'string') return Buffer.from(payload, 'utf8')
  if (Buffer.isBuffer(payload)) return payload
  return null // a stream: management answers are never one
}

/** Keeps the answer of the request that claimed the slot, or lets the slot go. */
async function settle(
  sql: Sql,
  key: Buffer,
  request: FastifyRequest,
  reply: FastifyReply,
  payload: unknown,
): Promise<void> {
  const { slot, claim } = request.idempotency!
  const body = payloadBytes(payload)
  if (!isKept(reply.statusCode) || body === null) return releaseIdempotencyKey(sql, slot, claim!)
  const headers: Record<string, string> = {}
  for (const name of KEPT_HEADERS) {
    const value = reply.getHeader(name)
    if (value !== undefined) headers[name] = String(value)
  }
  const answer = { status: reply.statusCode, headers, sealedBody: seal(key, body, sealedFor(slot)) }
  await keepAnswer(sql, slot, claim!, answer, IDEMPOTENCY_KEEP_SECONDS)
}

/**
 * The hooks on the management scope, each in its phase, after its authorization and rate hooks
 * (routes.ts, MANAGEMENT_HOOKS); `idempotencyRequests` declares what they share on a request.
 */
export function idempotencyRequests(scope: FastifyInstance): void {
  scope.decorateRequest('idempotency', null)
}

/** onRequest, before the body is read: a bad header is refused without waiting for it. */
export async function readIdempotencyKey(request: FastifyRequest): Promise<void> {
  if (!IDEMPOTENT_METHODS.has(request.method)) return
  // A streamed body is not read before the handler (a key import, idempotent by itself).
  if (request.routeOptions.config.streamedBody === true) return
  const idempotencyKey = idempotencyKeyOf(request)
  if (idempotencyKey === null) return
  request.idempotency = {
    slot: { keyId: request.principal!.key.id, idempotencyKey },
    fingerprint: new Fingerprint(request.method, request.url),
    claim: null,
  }
}

/** preParsing: the body's bytes go into the fingerprint as they are read. */
export async function fingerprintBody(request: FastifyRequest, _reply: FastifyReply, payload: RequestPayload) {
  const idempotent = request.idempotency
  return idempotent !== null && hasBody(request) ? idempotent.fingerprint.tap(payload) : payload
}

/**
 * preValidation, once the body has arrived, before its validation: a request that is not the first
 * with its key is answered here, and never reaches the handler.
 */
export function claimIdempotencyKey({ sql, encryptionKey }: IdempotencyOptions) {
  return async (request: FastifyRequest, reply: FastifyReply): Promise<unknown> => {
    const idempotent = request.idempotency
    if (idempotent === null) return
    const fingerprint = idempotent.fingerprint.digest()
    const claim = randomUUID()
    const found = await claimSlot(sql, idempotent.slot, fingerprint, claim, {
      keepSeconds: IDEMPOTENCY_KEEP_SECONDS,
      staleAfterSeconds: IDEMPOTENCY_STALE_CLAIM_SECONDS,
    })
    if (found.kind === 'claimed') {
      // The store deadline answered 503 while the claim was on its way: nothing will run.
      if (reply.sent || answeredByStoreDeadline(request)) return releaseIdempotencyKey(sql, idempotent.slot, claim)
      idempotent.claim = claim
      return
    }
    if (!found.fingerprint.equals(fingerprint)) {
      throw new ApiError(
        'idempotency_key_reused',
        'this Idempotency-Key was used with another method, path or body; use a new key for a new request',
      )
    }
    if (found.kind === 'lost') {
      const { type, id } = found.target
      throw new ApiError(
        'idempotency_answer_lost',
        `the first request with this Idempotency-Key made its change (${type} ${id}) but its answer was lost; ` +
          'it is not made again',
      )
    }
    if (found.kind === 'running') {
      throw new ApiError('idempotency_key_in_flight', 'a request with this Idempotency-Key is still running', {
        headers: { 'retry-after': '1' },
      })
    }
    return replay(reply, idempotent.slot, found.answer, encryptionKey)
  }
}

/** onSend: the answer is kept before the client sees it, so a retry that follows it finds it. */
export function keepIdempotentAnswer({ sql, encryptionKey }: IdempotencyOptions) {
  return async (request: FastifyRequest, reply: FastifyReply, payload: unknown): Promise<unknown> => {
    if (request.idempotency?.claim == null) return payload
    stopStoreDeadline(request)
    if (answeredByStoreDeadline(request)) {
      // The handler may still run, its transaction about to commit: the release waits for that
      // (store/idempotency.ts), in the background, so that the 503 leaves now and the handler's own
      // answer finds the reply sent. Meanwhile the key is in flight (409) for a retry.
      settle(sql, encryptionKey, request, reply, payload).catch((err: unknown) =>
        request.log.error({ err }, 'the idempotency key of a request answered 503 could not be let go'),
      )
      return payload
    }
    try {
      await withDeadline(
        settle(sql, encryptionKey, request, reply, payload),
        storeDeadlinesOf(request.server).managementMs,
      )
    } catch (err) {
      // The change (if any) is made: its answer goes out. The claim stays, as a request still in
      // flight, until it goes stale and a retry takes it over.
      request.log.error({ err }, 'the idempotent answer could not be kept')
    }
    return payload
  }
}

/** Deletes expired keys on a timer, stopped when the scope closes. */
export function startIdempotencySweep(scope: FastifyInstance, { sql, sweepIntervalMs }: IdempotencyOptions): void {
  const sweep = new IdempotencySweep(sql, scope.log, sweepIntervalMs)
  sweep.start()
  scope.addHook('onClose', async () => sweep.stop())
}
