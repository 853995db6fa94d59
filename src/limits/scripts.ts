// The two lease scripts, each run atomically by Redis (docs/internals.md, limits). Both read
// Redis's own clock (TIME), so that replicas with skewed clocks share one bucket and one expiry.
//
// Both scripts know the "incarnation" of the Redis data: a key set, with its birth time, by the
// first script that finds it missing. For `graceMs` after that birth nothing is granted, since a
// Redis that lost its keys (restart, FLUSHDB) cannot know the leases replicas still hold; they
// expire within that grace unless renewed, and a renewal re-registers what it keeps.

const CLOCK_AND_INCARNATION = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local born = tonumber(redis.call('GET', KEYS[2]))
if not born then
  born = now
  redis.call('SET', KEYS[2], now)
end`

/**
 * A rate's token bucket (bucket.ts, repeated in Lua) and the unexpired leases of every replica,
 * as fields `l:<replica>` = `<amount>:<expires ms>`. Tokens in the bucket plus leases out never
 * exceed N, so a lease spent late cannot add to a bucket that refilled meanwhile.
 * `ep` names this copy of the bucket, as a quota's does: `extra` (what the caller admitted on its
 * own while Redis was unusable) is charged only to a bucket made since the caller last saw one, a
 * Redis that forgot (restarted empty), and down to empty at most: a bucket that lived through the
 * outage refilled meanwhile, and charging it would refuse for W a tenant that stayed under its rate.
 * A bucket made for a caller that saw another one starts as that caller last saw it, refilled
 * (`seen`), not full: full, it would let pass again what was admitted just before the loss.
 * `debt` is what a metered limit's answers used beyond the caller's lease (leased-limit.ts, charge):
 * charged to any bucket, below zero too, down to -N (docs/internals.md, limits in units).
 * ARGV: replica, N, W ms, keep, returned, wanted, extra, ttl ms, batch, grace ms, epoch seen ('' if
 * none), new epoch, seen tokens (-1 if none), debt.
 * Returns {granted, tokens after (string), ms until `batch` tokens, 1 if in the grace, epoch}.
 */
export const RATE_LEASE = `${CLOCK_AND_INCARNATION}
local n = tonumber(ARGV[2])
local w = tonumber(ARGV[3])
local keep = tonumber(ARGV[4])
local wanted = tonumber(ARGV[6])
local ttl = tonumber(ARGV[8])
local batch = tonumber(ARGV[9])
local mine = 'l:' .. ARGV[1]
local open = born + tonumber(ARGV[10])
local fields = redis.call('HGETALL', KEYS[1])
local ep = ARGV[12]
-- A bucket made in the grace starts empty: leases of before the loss may still be spent, and
-- they are at most N (docs/internals.md, limits).
local tokens = n
if now < open then tokens = 0 end
local at = now
local fresh = true
local others = 0
local registered = 0
for i = 1, #fields, 2 do
  local f = fields[i]
  local v = fields[i + 1]
  if f == 'tk' then
    tokens = tonumber(v)
    fresh = false
  elseif f == 'at' then at = tonumber(v)
  elseif f == 'ep' then ep = v
  else
    local sep = string.find(v, ':', 1, true)
    local amount = tonumber(string.sub(v, 1, sep - 1))
    if tonumber(string.sub(v, sep + 1)) <= now then
      if f ~= mine then redis.call('HDEL', KEYS[1], f) end
    elseif f == mine then registered = amount
    else others = others + amount end
  end
end
local rebuilt = ARGV[11] ~= '' and ARGV[11] ~= ep
if fresh and rebuilt and tonumber(ARGV[13]) >= 0 then tokens = math.min(tokens, tonumber(ARGV[13])) end
if now > at then tokens = tokens + (now - at) * n / w end
-- Until now the caller's lease counted as registered, not as \`keep\`: what it spent of it since
-- was spent while the bucket could not refill into that room, and is freed from now on only.
if tokens > n - others - registered then tokens = n - others - registered end
tokens = tokens + tonumber(ARGV[5])
local cap = n - others - keep
if tokens > cap then tokens = cap end
-- Charged down to empty at most: a debt would refuse for up to W, after Redis is back, a tenant
-- for what degraded mode let it do (docs/internals.md, limits).
if rebuilt then tokens = math.min(tokens, math.max(0, tokens - tonumber(ARGV[7]))) end
tokens = tokens - (tonumber(ARGV[14]) or 0)
if tokens < -n then tokens = -n end
local granted = 0
local wait = 0
if now < open then wait = open - now
else
  granted = math.max(0, math.min(wanted, math.floor(tokens)))
  tokens = tokens - granted
  if tokens < batch then wait = math.ceil((batch - tokens) * w / n) end
end
if keep + granted > 0 then redis.call('HSET', KEYS[1], mine, (keep + granted) .. ':' .. (now + ttl))
else redis.call('HDEL', KEYS[1], mine) end
redis.call('HSET', KEYS[1], 'tk', tostring(tokens), 'at', now, 'ep', ep)
redis.call('PEXPIRE', KEYS[1], math.max(math.ceil((n - tokens) * w / n), ttl) + 1000)
local grace = 0
if now < open then grace = 1 end
return {granted, tostring(tokens), wait, grace, ep}`

/**
 * A quota's month: `used` counts every unit granted (spent or leased), `ep` names this copy of
 * the key, `init` the month's use it was made from. Missing and no `init` given: returns {-1} so
 * that the caller reads Postgres and calls again; so too when the caller saw another copy (this
 * one was rebuilt since) and did not read. A caller whose epoch differs re-registers what it
 * keeps, and adds what it admitted that Postgres may not have held when this copy was read
 * (docs/internals.md, "A month rebuilt from Postgres"); returns count only in the epoch they were
 * granted in, and `extra` only there too (a rebuilt copy counts it in what was not written).
 * Each call is a report named by its caller (KEYS[3], one a replica and month: `<name>:<granted>`),
 * applied once: a caller whose answer did not come in time sends the same report again, and Redis
 * may have run the first (a paused or stopped server runs what was written to it once it goes on).
 * A report already applied to this copy of the month changes nothing and answers its grant again.
 * ARGV: M, epoch, keep, returned, wanted, extra, init (-1: unknown), expire at ms, new epoch, grace ms,
 * report's name, ms the name is kept, unwritten, unwritten since the caller's read (when it read the
 * month, `init`: its read holds the rest, and a copy made from another read is charged the
 * difference when the caller's found more).
 * Returns {granted, used after (string), ms until grants resume, epoch, 1 if in the grace}.
 */
export const QUOTA_LEASE = `${CLOCK_AND_INCARNATION}
local m = tonumber(ARGV[1])
local used = tonumber(redis.call('HGET', KEYS[1], 'used'))
local init = tonumber(ARGV[7])
local epoch
local made = false
-- The month's use the copy was made from (-1: unknown).
local read = -1
if not used then
  if init < 0 then return {-1, '0', 0, '', 0} end
  used = init
  epoch = ARGV[9]
  made = true
  redis.call('HSET', KEYS[1], 'ep', epoch, 'init', init)
  redis.call('PEXPIREAT', KEYS[1], ARGV[8])
else
  epoch = redis.call('HGET', KEYS[1], 'ep')
  read = tonumber(redis.call('HGET', KEYS[1], 'init')) or -1
end
local wait = 0
local grace = 0
local open = born + tonumber(ARGV[10])
if now < open then
  wait = open - now
  grace = 1
end
-- Applied to a copy of the month that is gone (the name outlived it): applied again to this one.
local last = redis.call('GET', KEYS[3])
if last and not made then
  local sep = string.find(last, ':', 1, true)
  if sep and string.sub(last, 1, sep - 1) == ARGV[11] then
    return {tonumber(string.sub(last, sep + 1)), tostring(used), wait, epoch, grace}
  end
end
-- A copy made since the one the caller saw, from another's read: the caller reads the month too.
if ARGV[2] ~= epoch and ARGV[2] ~= '' and not made and init < 0 and read >= 0 then return {-1, '0', 0, '', 0} end
if ARGV[2] == epoch then used = used - tonumber(ARGV[4]) + tonumber(ARGV[6])
elseif made then used = used + tonumber(ARGV[3]) + tonumber(ARGV[14])
elseif init >= 0 and read >= 0 then
  -- The caller's read came after its meter wrote: the copy's read missed that write only if the
  -- caller's found more (the month's use only grows), and then by at most the difference.
  used = used + tonumber(ARGV[3]) + math.min(tonumber(ARGV[13]), tonumber(ARGV[14]) + math.max(0, init - read))
else used = used + tonumber(ARGV[3]) + tonumber(ARGV[13]) end
if used < 0 then used = 0 end
local granted = 0
if grace == 0 then granted = math.max(0, math.min(tonumber(ARGV[5]), m - used)) end
used = used + granted
redis.call('HSET', KEYS[1], 'used', used)
redis.call('SET', KEYS[3], ARGV[11] .. ':' .. granted, 'PX', ARGV[12])
return {granted, tostring(used), wait, epoch, grace}`
