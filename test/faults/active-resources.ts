// Loaded before the gateway in its process (`--import` ahead of test/faults/gateway-process.ts, by
// test/faults/exchange-storm.test.ts): answers { type: 'resources' } over IPC with what keeps the
// process's event loop alive, counted by kind (process.getActiveResourcesInfo(): each ref'd timer
// as 'Timeout', each socket as 'TCPSocketWrap', …). A timer or socket an exchange leaves behind
// shows here. A preload keeps this out of the gateway's code and out of the harness other fault
// tests share, and it asks nothing of Node's internals (unlike _getActiveHandles).
if (process.send === undefined) throw new Error('run with an IPC channel')

process.on('message', (message: { type?: string }) => {
  if (message.type !== 'resources') return
  const counts: Record<string, number> = {}
  for (const kind of process.getActiveResourcesInfo()) counts[kind] = (counts[kind] ?? 0) + 1
  process.send!({ type: 'resources', counts })
})
