// Answers that never have content (RFC 9110 §6.4.1): a 204, a 304, and any answer to HEAD. Their
// head may name a Content-Length other than 0 (a 304 the length of the 200 it stands for, §8.6;
// a HEAD answer the length a GET would have): the answer is whole with its head. undici, which
// reads a 204's or 304's Content-Length as bytes still to come, reports the answer as cut short
// once its head is over (UND_ERR_RES_CONTENT_LENGTH_MISMATCH); upstream-call.ts ends it whole.

/** Whether the answer with `statusCode` to a `method` request has no content, whatever its head says. */
export function hasNoContent(statusCode: number, method: string): boolean {
  return statusCode === 204 || statusCode === 304 || method === 'HEAD'
}

/** Whether `error` is undici's finding that an answer's body is shorter than its Content-Length. */
export function isLengthMismatch(error: Error): boolean {
  return (error as { code?: string }).code === 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH'
}
