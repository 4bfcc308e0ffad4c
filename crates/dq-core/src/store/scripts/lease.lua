-- lease.lua: take or keep a lease: one holder at a time, for `ttl` ms after its last renewal (dq-checker:
-- the one that sends alerts and reads the dead-job events).
--
-- KEYS[1]: the lease ({<prefix>}:checker), a string: the holder's id, expiring
-- ARGV[1]: who asks   ARGV[2]: ttl in ms
-- Returns: 1 when the caller holds the lease now (taken or renewed), 0 when someone else does.

local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
