#!lua name=noisylab
-- noisylab's queue disciplines as a Redis 7 function library: the post's
-- shared FIFO, its fair queue (round robin over tenants), the Virtual Token
-- Counter (least service first, weighted), a per-tenant concurrency cap
-- (optionally lending idle workers past it) and a per-tenant queue limit.
-- Every scheduling decision is made here, inside the server, in one atomic
-- call: a submit, a take, a finish and the next take.
--
-- Load it with `redis-cli FUNCTION LOAD REPLACE "$(cat noisylab.lua)"`; a
-- worker then loops: FCALL noisylab_take 0 P 0 (or, with nothing to take,
-- BLPOP P.."wake" and FCALL noisylab_take 0 P 1), which hands it
-- "job tenant lease", run the job, FCALL noisylab_finish 0 P job tenant
-- lease, which hands back the next job. A submitter calls FCALL
-- noisylab_submit 0 P job tenant [cost [key]].
--
-- Settings after setup (FCALL noisylab_set 0 P name value): lease
-- (microseconds, below), watch (1, below), keys (1: two-level fairness,
-- fair and vtc: the discipline picks a tenant, and within its turn the
-- tenant's API keys take turns, one job each; a submit then names the
-- job's key).
--
-- Clients that stop waiting (after setting watch): a client
-- whose job has not started when its patience runs out calls FCALL
-- noisylab_abandon 0 P job cancel: 1 if the job was still waiting (with
-- cancel = 1 it is dropped at its turn, without a worker; else it still
-- runs, unread), 0 if it had started.
--
-- Leases (after setting lease): a take leases the
-- job to its worker until the server's clock passes the lease; a worker
-- holding a job longer renews it (FCALL noisylab_renew 0 P job tenant
-- lease). Every call first hands expired leases' jobs back to their
-- tenant's queue, by their number ahead of every job that never started
-- (noisylab_reap does only that, for a queue whose
-- workers are all gone): a worker that died or stopped loses its job, its
-- cap slot is freed, and the job starts again in its tenant's turn. A
-- finish is fenced: one that reaches the server at or after its lease's
-- instant is refused (logged "x"), reaped before it or not, and the job
-- counts only when its new holder finishes it (the rule of the SQL
-- functions and of the model, src/engine/faults.rs).
--
-- Keys. Every key of one queue sits under a prefix P (ARGV[1], for example
-- "noisylab:7f3a:0:"), so many queues share a server; tenants and jobs are
-- numbers, a job's id growing with its arrival.
--   P.."cfg"      hash   queue = fifo | fair | vtc | halt, cap, limit, reserve
--                        (-1: no lending), expect (jobs accepted in all),
--                        lease (microseconds; absent: no leases), watch
--                        (1: clients may stop waiting), keys (1: key turns)
--   P.."q:"..t    list   tenant t's waiting jobs, oldest first; with keys:
--   P.."k:"..k    list   API key k's waiting jobs, oldest first
--   P.."kt:"..t   list   tenant t's keys with work, the next to serve first
--   P.."kw"       hash   tenant -> its waiting jobs, all keys together
--   P.."jk"       hash   job -> its key, until it finishes
--   P.."run"      hash   with a cap: tenant -> its jobs running now
--   P.."queued"   string jobs waiting, all tenants
--   P.."ready"    zset   fifo: tenants below their cap with work, scored by
--                        their oldest job
--   P.."fresh"    list   fair: tenants that just got work after having none;
--                        served first, one job each
--   P.."ring"     list   fair: tenants served that still have work, or back
--                        from their cap; a turn sends a tenant to the back
--   P.."vready"   zset   vtc: tenants below their cap with work, scored by
--                        their counter; members are tenants zero-padded to
--                        ten digits, so equal counters go to the lower id
--   P.."vback"    zset   vtc: tenants with work (ready or at their cap), by
--                        counter: the floor a newcomer is lifted to
--   P.."ctr"      hash   vtc: tenant -> its counter, service ÷ weight
--   P.."w"        hash   vtc: tenant -> its weight (absent: 1)
--   P.."cost"     hash   vtc: job -> its cost, until it finishes (a
--                        redelivered job's charge is refunded)
--   P.."vlast"    string vtc: the counter of the tenant whose start last
--                        left nobody with work: the floor while nobody has
--   P.."capped"   zset   with lending: tenants at their cap with work, by
--                        their oldest job
--   P.."runnable" string with a cap: jobs that may start now, the sum over
--                        tenants of min(waiting, cap - running) (without a
--                        cap every waiting job may: P.."queued")
--   P.."idle"     string workers blocked on P.."wake"
--   P.."wake"     list   one token per idle worker woken to take a job
--   P.."pending"  string wake tokens pushed and not yet taken up: a submit
--                        wakes a worker only for a job no token covers yet
--   P.."lease"    zset   "job tenant lease" -> when the lease runs out (µs
--                        on the server's clock), for every job running
--   P.."lid"      string the last lease number given
--   P.."fin"      set    the leases whose finish went through
--   P.."renewed"  string renewals that went through
--   P.."wait"     hash   with watch: job -> 1 while it waits for its first
--                        start, "c" once its client left and cancelled it
--   P.."log"      list   "e|s|f|r|l|x|a job sec usec [woke]": enqueued,
--                        started, finished, refused, lease ran out (the job
--                        went back to its queue), late finish refused, its
--                        client stopped waiting; on the server's clock (TIME)
--   P.."done", P.."end": jobs ended (finished, or dropped at their turn);
--                        a token once `expect` is reached
--
-- Cost. fair: O(1) a call; fifo, vtc, a cap with lending: O(log tenants)
-- (a few sorted-set operations); leases add O(log running) a call; key
-- turns and watch add O(1) (list and hash operations; a take skips the
-- cancelled jobs it meets, each once); never a scan over tenants or jobs. Keys are built from the prefix rather than
-- passed in KEYS: for one server, not a cluster.
--
-- The same rules as noisylab's in-process schedulers (src/sched/), which
-- the tests hold these functions to, job for job.

local NO_CAP = 2147483647

-- Each queue's settings, read from P.."cfg" once (they change only by
-- setup, halt and expect, which keep this copy in step).
local settings = {}

local function cfg(P)
  local c = settings[P]
  if c then return c end
  local v = redis.call('HMGET', P .. 'cfg', 'queue', 'cap', 'limit', 'reserve', 'expect', 'lease',
    'watch', 'keys')
  if not v[1] then
    error('noisylab: no queue under prefix ' .. P)
  end
  c = { queue = v[1], cap = tonumber(v[2]), limit = tonumber(v[3]),
        reserve = tonumber(v[4]), expect = tonumber(v[5]), lease = tonumber(v[6]),
        watch = v[7] == '1', keys = v[8] == '1' }
  settings[P] = c
  return c
end

-- The server's clock as "sec usec", for the log, and in microseconds.
local function clock()
  local t = redis.call('TIME')
  return t[1] .. ' ' .. t[2], tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- A job's lease, as P.."lease" holds it, and an instant as a score.
local function leased(job, t, lid)
  return job .. ' ' .. t .. ' ' .. lid
end

local function usec(x)
  return string.format('%.0f', x)
end

local function entry(kind, job, stamp)
  return kind .. ' ' .. job .. ' ' .. stamp
end

local function running(P, t)
  return tonumber(redis.call('HGET', P .. 'run', t) or 0)
end

-- How many of a tenant's `w` waiting jobs may start with `r` running.
local function startable(c, w, r)
  return math.max(0, math.min(w, c.cap - r))
end

-- With a cap, keep P.."runnable" as a tenant goes from (w0, r0) to (w1, r1).
local function runnable(P, c, w0, r0, w1, r1)
  local delta = startable(c, w1, r1) - startable(c, w0, r0)
  if delta ~= 0 then redis.call('INCRBY', P .. 'runnable', delta) end
end

-- A tenant's waiting jobs: its list, or with keys its keys' lists in
-- turn. These five are all that touch them.

-- Its next job: its oldest, or with keys the oldest of the key whose turn
-- it is.
local function head(P, c, t)
  local q = P .. 'q:' .. t
  if c.keys then
    local k = redis.call('LINDEX', P .. 'kt:' .. t, 0)
    if not k then return nil end
    q = P .. 'k:' .. k
  end
  local h = redis.call('LINDEX', q, 0)
  if h then return tonumber(h) end
  return nil
end

local function waiting(P, c, t)
  if c.keys then return tonumber(redis.call('HGET', P .. 'kw', t) or 0) end
  return redis.call('LLEN', P .. 'q:' .. t)
end

-- Append `job` (of API key `key`) unless the tenant has `limit` waiting:
-- returns how many it had.
local function append(P, c, t, job, key)
  if not c.keys then
    local q = P .. 'q:' .. t
    local w = redis.call('RPUSH', q, job) - 1
    if w >= c.limit then redis.call('RPOP', q) end
    return w
  end
  local w = waiting(P, c, t)
  if w >= c.limit then return w end
  if redis.call('RPUSH', P .. 'k:' .. key, job) == 1 then
    redis.call('RPUSH', P .. 'kt:' .. t, key) -- a key with work joins the back
  end
  redis.call('HSET', P .. 'jk', job, key)
  redis.call('HINCRBY', P .. 'kw', t, 1)
  return w
end

-- Take the tenant's next job off its queue.
local function pop(P, c, t)
  if not c.keys then return tonumber(redis.call('LPOP', P .. 'q:' .. t)) end
  local turns = P .. 'kt:' .. t
  local k = redis.call('LPOP', turns)
  local q = P .. 'k:' .. k
  local job = redis.call('LPOP', q)
  if redis.call('LLEN', q) > 0 then redis.call('RPUSH', turns, k) end
  redis.call('HINCRBY', P .. 'kw', t, -1)
  return tonumber(job)
end

-- A handed-back job into list `l` by its number: ahead of every job that
-- never started (all numbered after it), behind older ones handed back
-- before it (the scan covers those only). The list's new length.
local function put_back(l, job)
  local n = redis.call('LLEN', l)
  for i = 0, n - 1 do
    local at = redis.call('LINDEX', l, i)
    if tonumber(at) > job then
      return redis.call('LINSERT', l, 'BEFORE', at, job)
    end
  end
  return redis.call('RPUSH', l, job)
end

-- `job` back among the tenant's waiting jobs by its number (with keys,
-- among its key's, and its key first of the turns if it had no work).
local function hand_back(P, c, t, job)
  if not c.keys then
    put_back(P .. 'q:' .. t, job)
    return
  end
  local k = redis.call('HGET', P .. 'jk', job)
  if put_back(P .. 'k:' .. k, job) == 1 then
    redis.call('LPUSH', P .. 'kt:' .. t, k)
  end
  redis.call('HINCRBY', P .. 'kw', t, 1)
end

-- vtc: a tenant's member in the counters' sorted sets, and its counter.
-- Counters are written with 17 digits, so they read back to the bit and
-- every sum is the in-process scheduler's own.
local function member(t)
  return string.format('%010d', tonumber(t))
end

local function digits(x)
  return string.format('%.17g', x)
end

local function counter(P, t)
  return tonumber(redis.call('HGET', P .. 'ctr', t) or 0)
end

-- The tenant can be served again (work waiting, below its cap).
local function ready(P, c, t, job)
  if c.queue == 'fifo' then
    redis.call('ZADD', P .. 'ready', job, t)
  elseif c.queue == 'vtc' then
    redis.call('ZADD', P .. 'vready', digits(counter(P, t)), member(t))
  else
    redis.call('RPUSH', P .. 'ring', t)
  end
end

-- vtc: a tenant with nothing waiting got a job: it banks no credit. Its
-- counter is lifted to the lowest among tenants with work, or, with none,
-- to the last one's to leave; it joins the tenants with work.
local function lift(P, t)
  local low = redis.call('ZRANGE', P .. 'vback', 0, 0, 'WITHSCORES')
  local floor
  if #low > 0 then
    floor = tonumber(low[2])
  else
    floor = tonumber(redis.call('GET', P .. 'vlast') or 0)
  end
  local x = math.max(counter(P, t), floor)
  redis.call('HSET', P .. 'ctr', t, digits(x))
  redis.call('ZADD', P .. 'vback', digits(x), member(t))
end

-- vtc: tenant t started `job` (`h`: its next waiting job, if any): its
-- counter grows by the job's cost ÷ its weight; back with the tenants with
-- work if it has more, or, the last to leave them, the next lift's floor.
local function served(P, t, job, h)
  local cost = tonumber(redis.call('HGET', P .. 'cost', job) or 1)
  local weight = tonumber(redis.call('HGET', P .. 'w', t) or 1)
  local x = counter(P, t) + cost / weight
  redis.call('HSET', P .. 'ctr', t, digits(x))
  if h then
    redis.call('ZADD', P .. 'vback', digits(x), member(t))
  elseif redis.call('ZCARD', P .. 'vback') == 0 then
    redis.call('SET', P .. 'vlast', digits(x))
  end
end

-- Queue a job (of `cost`, for vtc), or refuse it when its tenant has
-- `limit` waiting. Returns true, or false and the tenant's waiting count.
local function push(P, c, t, job, cost, key)
  local w = append(P, c, t, job, key) -- waiting before
  if w >= c.limit then return false, w end
  redis.call('INCR', P .. 'queued')
  if c.watch then redis.call('HSET', P .. 'wait', job, 1) end
  if c.queue == 'vtc' then
    if cost then redis.call('HSET', P .. 'cost', job, cost) end
    if w == 0 then lift(P, t) end
  end
  local r = 0
  if c.cap ~= NO_CAP then
    r = running(P, t)
    runnable(P, c, w, r, w + 1, r)
  end
  if w == 0 and r < c.cap then
    if c.queue == 'fair' then
      redis.call('RPUSH', P .. 'fresh', t)
    else
      ready(P, c, t, job)
    end
  elseif w == 0 and c.reserve >= 0 then
    redis.call('ZADD', P .. 'capped', job, t)
  end
  return true
end

-- Pop the tenant's next job and, with a cap, count it running.
local function start(P, c, t)
  local job = pop(P, c, t)
  redis.call('DECR', P .. 'queued')
  local r = 0
  local h = head(P, c, t)
  if c.cap ~= NO_CAP then
    r = redis.call('HINCRBY', P .. 'run', t, 1)
    local w = waiting(P, c, t)
    runnable(P, c, w + 1, r - 1, w, r)
  end
  return job, r, h
end

-- The next job by the discipline: tenant, job; nil when none may start.
local function take(P, c)
  local t
  if c.queue == 'fifo' then
    local z = redis.call('ZPOPMIN', P .. 'ready')
    if #z == 0 then return nil end
    t = z[1]
  elseif c.queue == 'vtc' then
    local z = redis.call('ZPOPMIN', P .. 'vready')
    if #z == 0 then return nil end
    t = tostring(tonumber(z[1]))
    redis.call('ZREM', P .. 'vback', z[1])
  else
    t = redis.call('LPOP', P .. 'fresh') or redis.call('LPOP', P .. 'ring')
    if not t then return nil end
  end
  local job, r, h = start(P, c, t)
  if c.queue == 'vtc' then served(P, t, job, h) end
  if h and r < c.cap then
    ready(P, c, t, h)
  elseif h and c.reserve >= 0 then
    redis.call('ZADD', P .. 'capped', h, t)
  end
  return t, job
end

-- With lending: the oldest job of a tenant at its cap, started over it.
local function take_over(P, c)
  local z = redis.call('ZPOPMIN', P .. 'capped')
  if #z == 0 then return nil end
  local t = z[1]
  if c.queue == 'vtc' then redis.call('ZREM', P .. 'vback', member(t)) end
  local job, _, h = start(P, c, t)
  if c.queue == 'vtc' then served(P, t, job, h) end
  if h then redis.call('ZADD', P .. 'capped', h, t) end
  return t, job
end

-- What a worker asking now gets, `idle` workers being idle (itself too).
local function next_job(P, c, idle)
  local t, job = take(P, c)
  if not t and c.reserve >= 0 and idle > c.reserve then
    t, job = take_over(P, c)
  end
  return t, job
end

-- Whether to wake one more idle worker: jobs that may start now (and,
-- with lending and more than `reserve` idle, the capped ones too) that no
-- wake token on its way covers yet.
local function wake_another(P, c, idle)
  local key = 'runnable'
  if c.cap == NO_CAP or (c.reserve >= 0 and idle > c.reserve) then
    key = 'queued'
  end
  local n = tonumber(redis.call('GET', P .. key) or 0)
  return n > tonumber(redis.call('GET', P .. 'pending') or 0)
end

-- A running job of tenant t finished.
local function finished(P, c, t)
  if c.cap == NO_CAP then return end -- nothing counted without a cap
  local r = redis.call('HINCRBY', P .. 'run', t, -1)
  if c.cap - r <= 0 then return end -- still at (lent, over) its cap
  local w = waiting(P, c, t)
  runnable(P, c, w, r + 1, w, r)
  if r + 1 ~= c.cap or w == 0 then return end
  if c.reserve >= 0 then redis.call('ZREM', P .. 'capped', t) end
  ready(P, c, t, head(P, c, t))
end

-- vtc: tenant t's counter given back the charge of `job`, which did not
-- run to its end.
local function refund(P, t, job)
  local cost = tonumber(redis.call('HGET', P .. 'cost', job) or 1)
  local weight = tonumber(redis.call('HGET', P .. 'w', t) or 1)
  local x = counter(P, t) - cost / weight
  redis.call('HSET', P .. 'ctr', t, digits(x))
  if redis.call('ZSCORE', P .. 'vback', member(t)) then
    redis.call('ZADD', P .. 'vback', digits(x), member(t))
  end
  if redis.call('ZSCORE', P .. 'vready', member(t)) then
    redis.call('ZADD', P .. 'vready', digits(x), member(t))
  end
end

-- A running job of tenant t whose lease ran out goes back to its tenant's
-- queue by its number (hand_back), and its cap slot is freed: fifo serves it
-- by its own (oldest) arrival, fair in its tenant's turn (a tenant with nothing else
-- waiting joins the fresh tenants, served first), vtc refunds its charge
-- and does not lift the counter (the tenant is chosen again at the counter
-- it was chosen at).
local function requeue(P, c, t, job)
  local w = waiting(P, c, t) -- before
  if c.queue == 'vtc' then refund(P, t, job) end
  hand_back(P, c, t, job)
  redis.call('INCR', P .. 'queued')
  if c.queue == 'vtc' and w == 0 then
    -- back with work, unlifted: chosen again first, at the counter it had
    redis.call('ZADD', P .. 'vback', digits(counter(P, t)), member(t))
  end
  local r = 0
  if c.cap ~= NO_CAP then
    r = redis.call('HINCRBY', P .. 'run', t, -1)
    runnable(P, c, w, r + 1, w + 1, r)
  end
  -- its next job: this one (with keys, its key's turn may come later)
  local h = head(P, c, t)
  if w == 0 or (r < c.cap and r + 1 >= c.cap) then
    -- it was in no turn: nothing waiting, or at its cap and now below
    if c.reserve >= 0 and w > 0 then redis.call('ZREM', P .. 'capped', t) end
    if r >= c.cap then
      if c.reserve >= 0 then redis.call('ZADD', P .. 'capped', h, t) end
    elseif c.queue == 'fair' and w == 0 then
      redis.call('RPUSH', P .. 'fresh', t)
    else
      ready(P, c, t, h)
    end
  else
    -- already in its turn (or still at its cap), by its next job
    if c.queue == 'fifo' and r < c.cap then
      redis.call('ZADD', P .. 'ready', 'XX', h, t)
    elseif c.reserve >= 0 and r >= c.cap then
      redis.call('ZADD', P .. 'capped', 'XX', h, t)
    end
  end
end

-- Whether to wake one more idle worker: jobs that may start now (and,
-- with lending and more than `reserve` idle, the capped ones too) that no
-- wake token on its way covers yet; if so, a token for one.
local function wake(P, c)
  local idle = tonumber(redis.call('GET', P .. 'idle') or 0)
  if idle > 0 and wake_another(P, c, idle) then
    redis.call('DECR', P .. 'idle')
    redis.call('INCR', P .. 'pending')
    redis.call('RPUSH', P .. 'wake', 1)
    return 1
  end
  return 0
end

-- One more job ended (finished, or dropped at its turn): P.."end" gets a
-- token once `expect` have.
local function ended(P, c)
  if redis.call('INCR', P .. 'done') == c.expect then
    redis.call('RPUSH', P .. 'end', 1)
  end
end

-- With watch: tenant t's `job`, just taken, leaves the waiting jobs;
-- true if its client had cancelled it: then it is dropped without a
-- worker (its turn used, its cap slot given back) and counts as ended.
local function dropped(P, c, t, job)
  local w = P .. 'wait'
  local v = redis.call('HGET', w, job)
  redis.call('HDEL', w, job)
  if v ~= 'c' then return false end
  finished(P, c, t)
  if c.queue == 'vtc' then redis.call('HDEL', P .. 'cost', job) end
  if c.keys then redis.call('HDEL', P .. 'jk', job) end
  ended(P, c)
  return true
end

-- Every job whose lease ran out by `now` back in its queue (logged "l"),
-- and idle workers woken for them. Returns how many.
local function reap(P, c, stamp, now)
  if not c.lease then return 0 end
  local out = redis.call('ZRANGEBYSCORE', P .. 'lease', '-inf', usec(now))
  for _, m in ipairs(out) do
    redis.call('ZREM', P .. 'lease', m)
    local job, t = string.match(m, '^(%d+) (%d+) ')
    requeue(P, c, t, tonumber(job))
    redis.call('RPUSH', P .. 'log', entry('l', job, stamp))
  end
  if #out > 0 and c.queue ~= 'halt' then
    for _ = 1, #out do
      if wake(P, c) == 0 then break end
    end
  end
  return #out
end

-- A worker's next job, stamped started at `stamp` and leased until `now`
-- plus the lease: the job's log entry and "job tenant lease" for the
-- worker; or, with none to start, the worker counted idle (it then blocks
-- on P.."wake").
local function hand_out(P, c, stamp, now)
  if c.queue == 'halt' then
    redis.call('INCR', P .. 'idle')
    return nil, false
  end
  local idle = 1
  if c.reserve >= 0 then
    idle = tonumber(redis.call('GET', P .. 'idle') or 0) + 1
  end
  local t, job = next_job(P, c, idle)
  while t and c.watch and dropped(P, c, t, job) do
    t, job = next_job(P, c, idle)
  end
  if not t then
    redis.call('INCR', P .. 'idle')
    return nil, false
  end
  local lid = 0
  if c.lease then
    lid = redis.call('INCR', P .. 'lid')
    redis.call('ZADD', P .. 'lease', usec(now + c.lease), leased(job, t, lid))
  end
  return entry('s', job, stamp), leased(job, t, lid)
end

-- setup(P, queue, cap, limit, reserve [, tenant, weight]...): a new queue;
-- refused if P is in use. vtc's weights: pairs for tenants not of weight 1.
local function setup(_, args)
  local P = args[1]
  if redis.call('EXISTS', P .. 'cfg') == 1 then
    return redis.error_reply('noisylab: prefix ' .. P .. ' is already in use')
  end
  local cap = tonumber(args[3])
  local limit = tonumber(args[4])
  if cap < 0 then cap = NO_CAP end
  if limit < 0 then limit = NO_CAP end
  redis.call('HSET', P .. 'cfg', 'queue', args[2], 'cap', cap, 'limit', limit, 'reserve', args[5])
  for i = 6, #args, 1000 do -- in slices: unpack is bounded by Lua's stack
    redis.call('HSET', P .. 'w', unpack(args, i, math.min(i + 999, #args)))
  end
  settings[P] = nil
  return 1
end

-- submit(P, job, tenant [, cost [, key]]): {1, woke} (woke: 1 if an idle
-- worker was woken for it) or {0, waiting} (refused by the queue limit).
-- vtc charges `cost` (default 1) when the job starts; with keys, `key` is
-- the job's API key (any cost: fair ignores it).
local function submit(_, args)
  local P, job, t = args[1], tonumber(args[2]), args[3]
  local c = cfg(P)
  local stamp, now = clock()
  reap(P, c, stamp, now)
  local ok, waiting = push(P, c, t, job, args[4], args[5])
  if not ok then
    redis.call('RPUSH', P .. 'log', entry('r', job, stamp))
    return { 0, waiting }
  end
  local woke = wake(P, c)
  redis.call('RPUSH', P .. 'log', entry('e', job, stamp) .. ' ' .. woke)
  return { 1, woke }
end

-- take(P, woken): a worker asks for a job, at the run's start (0) or
-- woken by a token (1): "job tenant lease", or nil (the worker is idle).
local function take_job(_, args)
  local P = args[1]
  local c = cfg(P)
  if args[2] == '1' then redis.call('DECR', P .. 'pending') end
  local stamp, now = clock()
  reap(P, c, stamp, now)
  local started, job = hand_out(P, c, stamp, now)
  if started then redis.call('RPUSH', P .. 'log', started) end
  return job
end

-- finish(P, job, tenant, lease): the job is done; the same worker's next
-- job. With leases, a finish at or after its lease's instant (by the
-- server's clock) is refused and logged "x", whether or not a call reaped
-- the lease before it: the reap below runs first and hands the job back,
-- and the job's next holder finishes it. A finish sent again after its
-- reply was lost (the connection dropped) is known by its lease, in
-- P.."fin", and only hands out a job.
local function finish(_, args)
  local P, job, t = args[1], tonumber(args[2]), args[3]
  local c = cfg(P)
  local stamp, now = clock()
  reap(P, c, stamp, now)
  local held, mark = true, 'f'
  if c.lease then
    held = redis.call('ZREM', P .. 'lease', leased(job, t, args[4])) == 1
    if held then
      redis.call('SADD', P .. 'fin', args[4])
    elseif redis.call('SISMEMBER', P .. 'fin', args[4]) == 1 then
      mark = nil -- finished already, by this very lease
    else
      mark = 'x'
    end
  end
  if held then
    finished(P, c, t)
    if c.queue == 'vtc' then redis.call('HDEL', P .. 'cost', job) end
    if c.keys then redis.call('HDEL', P .. 'jk', job) end
  end
  local started, next = hand_out(P, c, stamp, now)
  if mark then redis.call('RPUSH', P .. 'log', entry(mark, job, stamp)) end
  if started then redis.call('RPUSH', P .. 'log', started) end
  if held then ended(P, c) end
  return next
end

-- renew(P, job, tenant, lease): the worker still holds the job: its lease
-- runs on from now. 1, or 0 if the lease ran out already (the job is back
-- in its queue or someone else's; this worker's finish will be refused).
local function renew(_, args)
  local P = args[1]
  local c = cfg(P)
  if not c.lease then return 1 end
  local stamp, now = clock()
  reap(P, c, stamp, now)
  local held = redis.call('ZADD', P .. 'lease', 'XX', 'CH', usec(now + c.lease),
    leased(args[2], args[3], args[4]))
  if held == 1 then redis.call('INCR', P .. 'renewed') end
  return held
end

-- abandon(P, job, cancel): the job's client stopped waiting. 1 if the job
-- had not started (logged "a"; with cancel = 1 it is dropped at its turn,
-- else it still runs), 0 if it had.
local function abandon(_, args)
  local P, job = args[1], args[2]
  cfg(P) -- the queue must exist
  local w = P .. 'wait'
  if redis.call('HGET', w, job) ~= '1' then return 0 end
  if args[3] == '1' then
    redis.call('HSET', w, job, 'c')
  else
    redis.call('HDEL', w, job)
  end
  local stamp = clock()
  redis.call('RPUSH', P .. 'log', entry('a', job, stamp))
  return 1
end

-- set(P, name, value): a setting after setup: lease (microseconds: takes
-- lease their jobs from now on), watch (1: clients may stop waiting for a
-- job that has not started; the queue keeps track of the jobs still
-- waiting), keys (1: a tenant's API keys take turns within its turn).
local SETTINGS = { lease = true, watch = true, keys = true }

local function set(_, args)
  local P, name = args[1], args[2]
  if not SETTINGS[name] then
    return redis.error_reply('noisylab: no setting ' .. tostring(name) .. '; allowed: lease, watch, keys')
  end
  cfg(P) -- the queue must exist
  redis.call('HSET', P .. 'cfg', name, tonumber(args[3]))
  settings[P] = nil
  return 1
end

-- reap(P): expired leases' jobs back in their queues, now: for a queue
-- whose workers have all gone quiet. Returns how many.
local function reap_now(_, args)
  local P = args[1]
  local stamp, now = clock()
  return reap(P, cfg(P), stamp, now)
end

-- expect(P, n): the submitter accepted n jobs in all; P.."end" gets a token
-- once n have finished.
local function expect(_, args)
  local P, n = args[1], tonumber(args[2])
  redis.call('HSET', P .. 'cfg', 'expect', n)
  cfg(P).expect = n
  if tonumber(redis.call('GET', P .. 'done') or 0) >= n then
    redis.call('RPUSH', P .. 'end', 1)
  end
  return 1
end

-- halt(P): the run is over early (Ctrl-C, a failure): workers get no more
-- jobs, only their current one finishes.
local function halt(_, args)
  local P = args[1]
  redis.call('HSET', P .. 'cfg', 'queue', 'halt')
  settings[P] = nil
  return 1
end

-- forget(P): the queue's keys are gone; drop its settings too.
local function forget(_, args)
  settings[args[1]] = nil
  return 1
end

-- The scheduler alone, for the equivalence tests: push(P, job, tenant
-- [, cost [, key]]) as submit without the wake; pop(P, idle) -> {tenant, job} or nil;
-- done(P, tenant) as a finish; back(P, tenant, job) as a lease running out.
local function push_only(_, args)
  local P = args[1]
  local ok, waiting = push(P, cfg(P), args[3], tonumber(args[2]), args[4], args[5])
  if ok then return { 1, 0 } end
  return { 0, waiting }
end

local function pop_only(_, args)
  local P = args[1]
  local t, job = next_job(P, cfg(P), tonumber(args[2]))
  if not t then return false end
  return { tonumber(t), job }
end

local function done_only(_, args)
  local P = args[1]
  finished(P, cfg(P), args[2])
  return 1
end

-- back(P, tenant, job): a running job handed back, as a lease running out
-- hands it back.
local function back_only(_, args)
  local P = args[1]
  requeue(P, cfg(P), args[2], tonumber(args[3]))
  return 1
end

redis.register_function('noisylab_setup', setup)
redis.register_function('noisylab_submit', submit)
redis.register_function('noisylab_take', take_job)
redis.register_function('noisylab_finish', finish)
redis.register_function('noisylab_expect', expect)
redis.register_function('noisylab_renew', renew)
redis.register_function('noisylab_set', set)
redis.register_function('noisylab_abandon', abandon)
redis.register_function('noisylab_reap', reap_now)
redis.register_function('noisylab_halt', halt)
redis.register_function('noisylab_forget', forget)
redis.register_function('noisylab_push', push_only)
redis.register_function('noisylab_pop', pop_only)
redis.register_function('noisylab_done', done_only)
redis.register_function('noisylab_back', back_only)
