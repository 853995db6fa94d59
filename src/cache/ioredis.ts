// The one place the gateway imports ioredis from: its VerbatimString module replaced first
// (ioredis-verbatim.ts), so that loading ioredis leaves String.prototype fast.
import './ioredis-verbatim.js'

export { type Callback, Cluster, Command, Redis, type RedisOptions, ReplyError } from 'ioredis'
