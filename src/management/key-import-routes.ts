// Importing keys from elsewhere into the parent's sub-accounts (docs/key-imports.md; docs/api.md,
// Importing keys): an ndjson body of up to 64 MiB, read as a stream into a spool on disk, never
// held whole, then written a batch at a time, and an ndjson answer, a line per input line, then a
// summary (docs/decisions/0371).
import { Readable } from 'node:stream'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { readImportBody } from '../auth/key-import-body.js'
import type { SpoolBudget } from '../auth/key-import-spool.js'
import { importAnswer } from '../auth/key-imports.js'
import { ApiError, payloadTooLarge, unsupportedMediaType, validationFailed } from '../errors.js'
import { ImportAnswerLine, ImportQuery, IMPORT_MAX_BYTES } from '../schemas/key-imports.js'
import { answeredByStoreDeadline, stopStoreDeadline, streamedBodyRead } from './hooks.js'
import { type ManagementContext, managementOperation, operation, originOf, parentOf } from './common.js'
import type { LeavePlace } from './key-import-places.js'
import type { OperationTable } from './operation-table.js'

const NDJSON = 'application/x-ndjson'

/** The media type of the request's Content-Type, lower-case, without parameters. */
const mediaType = (request: FastifyRequest) =>
  (request.headers['content-type'] ?? '').split(';', 1)[0]!.trim().toLowerCase()

/** A body that breaks a limit: refused whole, nothing imported; the rest is not read. */
const tooLarge = (what: 'bytes' | 'lines', limit: number) =>
  what === 'bytes'
    ? payloadTooLarge(limit)
    : new ApiError('payload_too_large', `the body has more than ${limit} lines: split the file and import each part`, {
        headers: { connection: 'close' },
      })

export const KEY_IMPORT_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'POST',
    url: '/api-keys/imports',
    schema: {
      ...operation('importApiKeys'),
      querystring: ImportQuery,
      // No body schema: the body is a stream its handler reads (ops/openapi.ts documents it).
      response: {
        200: {
          description: 'A line per input line, in order, then the summary',
          content: { [NDJSON]: { schema: ImportAnswerLine } },
        },
      },
    },
    config: { scope: 'sub_accounts:write', streamedBody: true },
    bodyLimit: IMPORT_MAX_BYTES,
    // Before the body: a wrong type or a declared size over the limit is refused at once.
    onRequest: () => async (request) => {
      if (mediaType(request) !== NDJSON) throw unsupportedMediaType(NDJSON, request.headers['content-type'])
      if (Number(request.headers['content-length'] ?? 0) > IMPORT_MAX_BYTES) throw payloadTooLarge(IMPORT_MAX_BYTES)
    },
    async handler(request, reply, { sql, cache, keyImports }) {
      const body = request.body as unknown
      if (!(body instanceof Readable))
        throw validationFailed([{ path: '/body', message: 'is empty: send one JSON object a line' }])
      let leave: LeavePlace
      try {
        leave = keyImports.enter(parentOf(request).id)
      } catch (err) {
        body.resume() // refused before a byte is read: the rest is dropped, the connection closed
        throw err
      }
      // Held until the answer ends (answerFrom), or until the handler ends without one.
      let handedOver = false
      try {
        const answer = await importHandler(request, reply, {
          sql,
          cache,
          body,
          leave,
          stallMs: keyImports.answerStallMs,
          budget: keyImports.spoolBudget,
        })
        handedOver = answer !== reply
        return answer
      } finally {
        if (!handedOver) leave()
      }
    },
  }),
]

/** The import once its place is taken: the body spooled, the first batch, then the answer streamed. */
async function importHandler(
  request: FastifyRequest<{ Querystring: { dry_run?: boolean } }>,
  reply: FastifyReply,
  {
    sql,
    cache,
    body,
    leave,
    stallMs,
    budget,
  }: Pick<ManagementContext, 'sql' | 'cache'> & {
    body: Readable
    leave: LeavePlace
    stallMs: number
    budget: SpoolBudget
  },
): Promise<FastifyReply> {
  const read = await readImportBody(body, 'sub-accounts', { budget }).catch((err: unknown) => {
    body.resume() // a spool that failed (spool_unavailable): the rest is dropped, the connection closed
    throw err
  })
  if ('tooLarge' in read) {
    body.resume() // the rest is dropped as it comes, and the connection closed after the answer
    throw tooLarge(read.tooLarge, read.limit)
  }
  streamedBodyRead(request, reply)
  if (read.lines === 0) {
    await read.spool.close()
    throw validationFailed([{ path: '/body', message: 'is empty: send one JSON object a line' }])
  }
  // The answer closes the spool when it ends, however it ends (auth/key-imports.ts).
  const answer = importAnswer(
    {
      sql,
      cache,
      accountId: parentOf(request).id,
      owner: 'sub-accounts',
      origin: originOf(request),
      dryRun: request.query.dry_run === true,
    },
    read,
  )
  // The first batch under the store deadline: a store that does not answer is a 503, not a
  // 200 cut short. The batches after it are statements of their own, each under the pool's
  // statement timeout; the answer is on its way by then.
  const first = await answer.next()
  if (answeredByStoreDeadline(request)) {
    await answer.return(undefined)
    return reply
  }
  stopStoreDeadline(request)
  // A client that stops reading is let go (KEY_IMPORT_ANSWER_STALL_MS): its connection closed.
  const stream = Readable.from(answerFrom(first, answer, leave, stallMs, () => reply.raw.destroy()))
  // A stream destroyed before its first read never runs answerFrom's `finally`: closed, it ends the
  // import (its spool) and its place all the same.
  stream.once('close', () => {
    answer
      .return(undefined)
      .catch((err: unknown) => request.log.warn({ err }, 'a key import did not close its spool'))
      .finally(leave)
  })
  return (
    reply
      .header('cache-control', 'no-store')
      .type(`${NDJSON}; charset=utf-8`)
      // A stream, not the schema's object: the schema documents its lines, no serializer writes them.
      .send(stream as never)
  )
}

/**
 * The answer's text from its first part on; a store failure after it ends the answer with an
 * `{"error"}` line instead of the summary: the lines answered stand, and importing the file again
 * writes only what is missing. A reader gone (the stream destroyed) ends `rest` too, which closes
 * the import's spool.
 */
async function* answerFrom(
  first: IteratorResult<string>,
  rest: AsyncGenerator<string>,
  leave: LeavePlace,
  stallMs: number,
  stalled: () => void,
): AsyncGenerator<string> {
  let timer: NodeJS.Timeout | undefined
  try {
    for (let part = first; part.done !== true; part = await rest.next()) {
      // A yield returns when the reader asks for more: the time between is the client's.
      timer = setTimeout(stalled, stallMs)
      yield part.value
      clearTimeout(timer)
    }
  } catch (err) {
    const detail = 'the store failed during the import: the lines answered stand; import the file again for the rest'
    const code = err instanceof ApiError ? err.code : 'store_unavailable'
    yield `${JSON.stringify({ error: { code, detail } })}\n`
  } finally {
    clearTimeout(timer)
    try {
      await rest.return(undefined)
    } finally {
      leave()
    }
  }
}
