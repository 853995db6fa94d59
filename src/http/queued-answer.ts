// A pipelined request's answer waits behind the answers before it on its connection, without a
// socket of its own. When the connection closes first, Node 26 destroys such an answer and says
// 'close'; Node 22 (which package.json allows) says nothing, and every listener that frees what
// the request holds (an upstream slot, a place in a queue, a WebSocket's cap) would wait for ever:
// a client could pin a route's slots by pipelining and hanging up. Here the answer is ended as
// Node 26 ends it.
import type { ServerResponse } from 'node:http'
import type { Socket } from 'node:net'

/** Whether `answer` waits behind another on its connection (Node assigns it the socket later). */
function isQueued(answer: ServerResponse): boolean {
  return answer.socket === null
}

/**
 * Until `answer` gets its connection's socket, a close of `connection` destroys it and emits its
 * 'close' (unless Node already did). Costs nothing for an answer that is not queued.
 */
export function closeWithConnection(answer: ServerResponse, connection: Socket): void {
  if (!isQueued(answer) || answer.destroyed) return
  const lost = () => {
    answer.off('socket', assigned)
    if (answer.destroyed) return
    answer.destroy()
    answer.emit('close')
  }
  const assigned = () => connection.off('close', lost)
  connection.once('close', lost)
  answer.once('socket', assigned)
}
