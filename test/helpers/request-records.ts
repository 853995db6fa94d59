// Request-log records made up for the tests that write them without a gateway (request-log/writer.ts).
import type { RequestRecord } from '../../src/request-log/capture.js'

/** A UUID that says what it is: `kind` in its first group, `i` in its last. */
export const uuid = (kind: number, i: number) =>
  `${kind.toString(16).padStart(8, '0')}-0000-4000-8000-${i.toString(16).padStart(12, '0')}`
/** Two parents. */
export const ACCOUNTS = [uuid(1, 1), uuid(1, 2)]
const STEM = 'abcdef01-2345-4678-9abc-'
/** A request id of the gateway's own shape (http/guards.ts), the n-th of its process. */
export const madeId = (n: number) => STEM + n.toString(16).padStart(12, '0')

/** A record of the first parent, its first sub-account and key, answered 200: `fields` say the rest. */
export function logRecord(fields: Partial<RequestRecord> & Pick<RequestRecord, 'id' | 'path'>): RequestRecord {
  return {
    idGiven: false,
    timeMs: Date.now(),
    accountId: ACCOUNTS[0]!,
    tenantId: uuid(2, 1),
    keyId: uuid(3, 1),
    method: 'GET',
    route: '/api',
    status: 200,
    code: null,
    durationMs: 1,
    requestBytes: 0,
    responseBytes: 2,
    sourceIp: '127.0.0.1',
    cost: 1,
    forwarded: true,
    units: null,
    ...fields,
  }
}
