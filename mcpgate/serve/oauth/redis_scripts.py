"""The Lua scripts RedisStorage (redis_storage.py) runs: each runs atomically in Redis, so of two instances racing
for the same code or refresh token one wins, and a registration is counted, evicted and stored in one step. Above
each: the KEYS and ARGV it takes and what it answers. SCRIPTS names them as RedisStorage registers them.
"""

from __future__ import annotations

HELPERS = """
local function extend(key, ttl)
  if redis.call('TTL', key) < ttl then redis.call('EXPIRE', key, ttl) end
end
local function revoke(key, ttl)
  redis.call('SET', key, '1', 'KEEPTTL')
  extend(key, ttl)
end
"""

# KEYS: clients, client:<id>; ARGV: now, unused ttl, limit, client id, value, client key prefix. Full: the
# oldest never used (a finite score; a used one's is +inf) make room; 0 when every one kept was used
ADD_CLIENT = """
local now, ttl, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - ttl))
local excess = redis.call('ZCARD', KEYS[1]) + 1 - limit
if excess > 0 then
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(+inf', 'LIMIT', 0, excess)) do
    redis.call('ZREM', KEYS[1], id)
    redis.call('DEL', ARGV[6] .. id)
  end
  if redis.call('ZCARD', KEYS[1]) >= limit then return 0 end
end
redis.call('SET', KEYS[2], ARGV[5], 'EX', ttl)
redis.call('ZADD', KEYS[1], now, ARGV[4])
return 1
"""

# KEYS: code:<hash>, clients, client:<id>; ARGV: record, family, ttl, client id
ADD_CODE = """
if redis.call('ZSCORE', KEYS[2], ARGV[4]) then
  redis.call('ZADD', KEYS[2], '+inf', ARGV[4])
  redis.call('PERSIST', KEYS[3])
end
redis.call('HSET', KEYS[1], 'record', ARGV[1], 'family', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""

# KEYS: code:<hash>; ARGV: family prefix, revoked ttl. The record, or false (unknown, or used: revoked now)
CLAIM_CODE = (
    HELPERS
    + """
local found = redis.call('HMGET', KEYS[1], 'record', 'family')
if not found[1] then return false end
if redis.call('HSETNX', KEYS[1], 'used', '1') == 0 then
  revoke(ARGV[1] .. found[2], tonumber(ARGV[2]))
  return false
end
return found[1]
"""
)

# KEYS: refresh:<hash>, family:<family>; ARGV: record, family, expires at, ttl
ADD_REFRESH = (
    HELPERS
    + """
redis.call('SET', KEYS[2], '0', 'NX', 'EX', ARGV[4])
extend(KEYS[2], tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], 'record', ARGV[1], 'family', ARGV[2], 'expires_at', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""
)

# KEYS: refresh:<hash>; ARGV: family prefix. {record, used, family state} or false
READ_REFRESH = """
local found = redis.call('HMGET', KEYS[1], 'record', 'family', 'used')
if not found[1] then return false end
return {found[1], found[3] or '0', redis.call('GET', ARGV[1] .. found[2]) or '1'}
"""

# KEYS: refresh:<hash>; ARGV: family prefix, now, revoked ttl. The record, spent now, or false
CLAIM_REFRESH = (
    HELPERS
    + """
local found = redis.call('HMGET', KEYS[1], 'record', 'family', 'used', 'expires_at')
if not found[1] then return false end
local family = ARGV[1] .. found[2]
if found[3] == '1' then
  revoke(family, tonumber(ARGV[3]))
  return false
end
if redis.call('GET', family) ~= '0' or tonumber(found[4]) <= tonumber(ARGV[2]) then return false end
redis.call('HSET', KEYS[1], 'used', '1')
return found[1]
"""
)

# KEYS: access:<jti>, family:<family> (or the access key again when none); ARGV: family or "", ttl, binding
ADD_ACCESS = (
    HELPERS
    + """
redis.call('HSET', KEYS[1], 'family', ARGV[1], 'revoked', '0', 'binding', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[2])
if ARGV[1] ~= '' then
  redis.call('SET', KEYS[2], '0', 'NX', 'EX', ARGV[2])
  extend(KEYS[2], tonumber(ARGV[2]))
end
return 1
"""
)

# KEYS: access:<jti>; ARGV: family prefix, binding. 1 when revoked, unknown or bound to other claims, else 0
ACCESS_REVOKED = """
local found = redis.call('HMGET', KEYS[1], 'family', 'revoked', 'binding')
if not found[2] or found[2] == '1' or (found[3] or '') ~= ARGV[2] then return 1 end
if found[1] ~= '' and redis.call('GET', ARGV[1] .. found[1]) == '1' then return 1 end
return 0
"""

# KEYS: access:<jti>
REVOKE_ACCESS = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'revoked', '1') end
return 1
"""

# KEYS: secret:<name>; ARGV: the value seen, its replacement (set only while the value is still the one seen)
REPLACE_SECRET = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) end
return 1
"""

# KEYS: family:<family>; ARGV: revoked ttl (the family may not exist yet: made revoked)
REVOKE_FAMILY = (
    HELPERS
    + """
revoke(KEYS[1], tonumber(ARGV[1]))
return 1
"""
)


SCRIPTS = {
    "add_client": ADD_CLIENT,
    "add_code": ADD_CODE,
    "claim_code": CLAIM_CODE,
    "add_refresh": ADD_REFRESH,
    "read_refresh": READ_REFRESH,
    "claim_refresh": CLAIM_REFRESH,
    "add_access": ADD_ACCESS,
    "access_revoked": ACCESS_REVOKED,
    "revoke_access": REVOKE_ACCESS,
    "revoke_family": REVOKE_FAMILY,
    "replace_secret": REPLACE_SECRET,
}
