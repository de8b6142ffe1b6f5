-- noisylab's queue disciplines on PostgreSQL: the post's shared FIFO (one
-- job table, the oldest queued row taken FOR UPDATE SKIP LOCKED), its fair
-- queue (round robin over tenants), the Virtual Token Counter (least
-- service first, weighted), a per-tenant concurrency cap (optionally
-- lending idle workers past it) and a per-tenant queue limit. Every
-- scheduling decision is made here, inside the server, in one function
-- call: a submit, a take, a finish and the next take.
--
-- Needs PostgreSQL 9.5 or later (SKIP LOCKED, ON CONFLICT); noisylab's
-- reference is 15. Run it into a schema of its own:
--   CREATE SCHEMA myqueue; SET search_path TO myqueue; \i noisylab.sql
-- then, on every connection that uses the queue, SET search_path TO myqueue.
--
-- A worker: LISTEN on its channel (noisylab_join() gives its number),
-- then loops: SELECT * FROM noisylab_take(me, false) (or,
-- with nothing to take, wait for a 'wake' on its channel and
-- noisylab_take(me, true)), run the job, SELECT * FROM
-- noisylab_finish(me, job, tenant), which hands back its next job. A
-- submitter calls SELECT * FROM noisylab_submit(job, tenant, cost), or for
-- the jobs due at one instant SELECT * FROM noisylab_submit_many(jobs,
-- tenants, costs): one call, one transaction (submit.sql, after this file).
--
-- Tables. Jobs are numbers growing with their arrival, tenants numbers.
--   cfg     one row: queue = fifo | fair | vtc | halt, cap, qlimit, reserve
--           (-1: no lending), the counters below
--   plan    the noisylab lab's job holds, for its workers
--   job     every job: queued (q), running (r), finished (f) or refused
--           (x), with its tenant, cost and stamps (microseconds since the
--           epoch on the server's clock): it is the run's log too
--   tenant  one row per tenant with work so far: waiting, running, and
--           where it stands in the discipline's order:
--             fifo with a cap: ready = its oldest job, while below its cap
--               with work (without a cap the take reads the job table)
--             fair: ready = its place in line, lane 0 (fresh: it just got
--               work after having none; served first, one job each) or 1
--               (the ring: a turn sends it to the back)
--             vtc: vready while below its cap with work, ordered by ctr
--               (service ÷ weight), ties to the lower tenant
--             with lending: capped = its oldest job, while at its cap with
--               work
--   idle    workers waiting for a wake, longest waiting first
--   figures what each worker measured, left at the run's end
-- Counters in cfg: queued (jobs waiting), runnable (jobs that may start
-- now: the sum over tenants of min(waiting, cap - running)), idle,
-- pending (wakes sent and not yet taken up: a submit wakes a worker only
-- for a job no wake covers yet), done, expect, vlast (vtc: the counter of
-- the tenant whose start last left nobody with work).
--
-- Concurrency. Every call first locks the one cfg row (SELECT ... FOR
-- UPDATE), so its few statements see and leave a consistent queue, as a
-- Redis function runs alone: no job is taken twice, no tenant passes its
-- cap, no deadlock (one lock, always taken first). Each call is one short
-- transaction; the lock is held for the server time it takes (noisylab's
-- results report it per call).
--
-- Cost. Every statement reads one row by key or the first row of a
-- partial index (EXPLAIN of each is in the comments beside it): never a
-- scan or a sort over queued jobs or tenants, so a take costs the same at
-- a thousand queued jobs as at a million.
--
-- Leases (noisylab_lease(µs) after setup; none by default). A take leases
-- its job until the server's clock passes `until`; a worker holding a job
-- longer renews it (noisylab_renew). Every call first hands back the jobs
-- whose lease ran out (noisylab_reap does only that, for a queue nobody
-- calls): back in their tenant's queue by their own number, so before
-- every job of it that never started (fifo serves such a job by its own
-- arrival; fair in its tenant's turn, the tenant a newcomer if it had
-- nothing else waiting; vtc refunds the start's charge and does not lift
-- the counter), their cap slot freed, and an idle worker woken for each.
-- The takes seek past the last job started (tenant.last, cfg.taken):
-- those go back below the job. A finish names the lease it was taken
-- with: a finish whose lease ran out is refused (counted in job.late), one
-- sent again after it went through is known by its lease and ignored.
--
-- The same rules as noisylab's in-process schedulers (src/sched/), which
-- the tests hold these functions to, job for job.

CREATE TABLE cfg (
  one       boolean PRIMARY KEY DEFAULT true CHECK (one),
  queue     text NOT NULL,
  cap       int NOT NULL,
  qlimit    int NOT NULL,
  reserve   int NOT NULL,
  queued    bigint NOT NULL DEFAULT 0,
  runnable  bigint NOT NULL DEFAULT 0,
  idle      int NOT NULL DEFAULT 0,
  pending   int NOT NULL DEFAULT 0,
  done      bigint NOT NULL DEFAULT 0,
  expect    bigint,
  vlast     float8 NOT NULL DEFAULT 0,
  -- fifo without a cap: the last job started (every queued job is newer).
  taken     bigint NOT NULL DEFAULT -1,
  -- The last job submitted: a job's number must be greater.
  newest    bigint NOT NULL DEFAULT -1,
  channel   text NOT NULL,
  -- A take's lease, microseconds (NULL: takes hold no lease).
  lease     bigint
);
-- Each job's hold, nanoseconds, for the workers to read once (apart from
-- cfg: every call reads cfg whole).
CREATE TABLE plan (durations bigint[] NOT NULL);

-- Jobs start in their tenant's order and their numbers grow with their
-- submits (noisylab_submit refuses one that does not: with many
-- submitters, number them inside the submit, after its lock), so a take
-- seeks past the last one started (tenant.last, cfg.taken) rather than
-- over the index entries that started jobs leave until a vacuum.
CREATE TABLE job (
  id       bigint PRIMARY KEY,
  tenant   int NOT NULL,
  cost     float8 NOT NULL DEFAULT 1,
  state    "char" NOT NULL,
  enqueued bigint NOT NULL,
  started  bigint,
  finished bigint,
  woke     boolean NOT NULL DEFAULT false,
  -- With leases: the running job's lease (its number, its end), how
  -- often a lease of it ran out and a finish was refused, and how often
  -- its holders renewed a lease of it.
  lid      bigint,
  until    bigint,
  redelivered int NOT NULL DEFAULT 0,
  late     int NOT NULL DEFAULT 0,
  renewed  int NOT NULL DEFAULT 0
) WITH (autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0.05);
-- fifo's take, the post's default: the oldest queued job.
--   Limit -> LockRows -> Index Scan using job_queued on job
--            Index Cond: (id > $1)
CREATE INDEX job_queued ON job (id) WHERE state = 'q';
-- A tenant's next job.
--   Limit -> Index Only Scan using job_tenant_queued on job
--            Index Cond: ((tenant = $1) AND (id > $2))
CREATE INDEX job_tenant_queued ON job (tenant, id) WHERE state = 'q';
-- With leases: the running jobs whose lease ran out.
--   Index Scan using job_leased on job  Index Cond: (until <= $1)
CREATE INDEX job_leased ON job (until) WHERE state = 'r';

CREATE TABLE tenant (
  t       int PRIMARY KEY,
  waiting int NOT NULL DEFAULT 0,
  running int NOT NULL DEFAULT 0,
  weight  float8 NOT NULL DEFAULT 1,
  ctr     float8 NOT NULL DEFAULT 0,
  lane    smallint NOT NULL DEFAULT 0,
  ready   bigint,
  vready  boolean NOT NULL DEFAULT false,
  capped  bigint,
  -- Its last job started: every job of its still queued is newer.
  last    bigint NOT NULL DEFAULT -1
) WITH (fillfactor = 50, autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0);
-- fifo with a cap, and fair: the first tenant in line.
--   Limit -> Index Scan using tenant_ready on tenant
CREATE INDEX tenant_ready ON tenant (lane, ready) WHERE ready IS NOT NULL;
-- vtc: the least served tenant that may start a job.
--   Limit -> Index Scan using tenant_vready on tenant
CREATE INDEX tenant_vready ON tenant (ctr, t) WHERE vready;
-- vtc: the lowest counter among tenants with work (a newcomer's floor).
--   Limit -> Index Only Scan using tenant_vback on tenant
CREATE INDEX tenant_vback ON tenant (ctr) WHERE waiting > 0;
-- Lending: the tenant at its cap with the oldest job.
--   Limit -> Index Scan using tenant_capped on tenant
CREATE INDEX tenant_capped ON tenant (capped) WHERE capped IS NOT NULL;

CREATE TABLE idle (worker int PRIMARY KEY, since bigint NOT NULL);
CREATE INDEX idle_since ON idle (since);
CREATE TABLE figures (worker int PRIMARY KEY, text text NOT NULL);
-- Workers listening on their channel, by the server process that serves
-- each (a worker whose server process is gone is dead), and the workers a
-- wake was sent to and has not been taken up by.
CREATE TABLE worker (me int PRIMARY KEY, pid int NOT NULL);
-- A worker woken for a job a submit handed out (`handed`) or by a plain
-- wake (not); the jobs handed out and not yet picked up, in the order they
-- were handed (a woken worker picks up the first: a worker slow to hear
-- does not hold up the job handed out before another's).
CREATE TABLE woken (worker int PRIMARY KEY, handed boolean NOT NULL DEFAULT false);
CREATE TABLE handed (seq bigint PRIMARY KEY, job bigint NOT NULL, tenant int NOT NULL, lid bigint);
-- Places in line (fair's lanes, the idle workers' order).
CREATE SEQUENCE tick;
CREATE SEQUENCE worker_id;
-- Workers listening on their channel (joined).
CREATE SEQUENCE worker_ready;
-- Leases' numbers.
CREATE SEQUENCE lease_id;

-- No cap is a cap no tenant reaches.
CREATE FUNCTION nl_no_cap() RETURNS int IMMUTABLE LANGUAGE sql
AS $$ SELECT 2147483647 $$;

-- The server's clock, microseconds since the epoch.
CREATE FUNCTION nl_now() RETURNS bigint LANGUAGE sql
AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint $$;

-- The queue, locked for this call.
CREATE FUNCTION nl_lock() RETURNS cfg LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE c cfg;
BEGIN
  SELECT * INTO c FROM cfg FOR UPDATE;
  IF NOT FOUND THEN RAISE EXCEPTION 'noisylab: no queue here: call noisylab_setup first'; END IF;
  RETURN c;
END $$;

-- How many of a tenant's w waiting jobs may start with r running.
CREATE FUNCTION nl_startable(c cfg, w int, r int) RETURNS bigint IMMUTABLE LANGUAGE sql
AS $$ SELECT greatest(0, least(w, c.cap - r))::bigint $$;

-- With a cap, keep cfg.runnable as a tenant goes from (w0, r0) to (w1, r1).
CREATE FUNCTION nl_runnable(c cfg, w0 int, r0 int, w1 int, r1 int) RETURNS void LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE d bigint := nl_startable(c, w1, r1) - nl_startable(c, w0, r0);
BEGIN
  IF d <> 0 THEN UPDATE cfg SET runnable = runnable + d; END IF;
END $$;

-- The tenant can be served again (work waiting, below its cap), its
-- oldest job being `head`.
CREATE FUNCTION nl_ready(c cfg, p_t int, head bigint) RETURNS void LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
  IF c.queue = 'fifo' THEN
    IF c.cap <> nl_no_cap() THEN UPDATE tenant SET ready = head WHERE t = p_t; END IF;
  ELSIF c.queue = 'vtc' THEN
    UPDATE tenant SET vready = true WHERE t = p_t;
  ELSE
    UPDATE tenant SET lane = 1, ready = nextval('tick') WHERE t = p_t;
  END IF;
END $$;

-- A tenant's oldest waiting jobs: the first, and the one after.
CREATE FUNCTION nl_heads(p_t int, OUT first bigint, OUT second bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE after bigint := (SELECT last FROM tenant WHERE t = p_t);
BEGIN
  SELECT min(id) INTO first FROM job WHERE tenant = p_t AND state = 'q' AND id > after;
  IF first IS NOT NULL THEN
    SELECT min(id) INTO second FROM job WHERE tenant = p_t AND state = 'q' AND id > first;
  END IF;
END $$;

-- Start the tenant's oldest job at `stamp`: it, the tenant's running count
-- after, and its next waiting job (vtc charges the job's cost ÷ weight).
CREATE FUNCTION nl_start(c cfg, p_t int, stamp bigint,
                         OUT job bigint, OUT r int, OUT h bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  w int; x float8;
BEGIN
  SELECT first, second INTO job, h FROM nl_heads(p_t);
  IF c.lease IS NULL THEN
    UPDATE job SET state = 'r', started = stamp WHERE id = job;
  ELSE
    UPDATE job SET state = 'r', started = stamp, lid = nextval('lease_id'), until = stamp + c.lease
      WHERE id = job;
  END IF;
  UPDATE cfg SET queued = queued - 1;
  UPDATE tenant SET waiting = waiting - 1, running = running + 1, last = job WHERE t = p_t
    RETURNING waiting, running INTO w, r;
  IF c.cap <> nl_no_cap() THEN PERFORM nl_runnable(c, w + 1, r - 1, w, r); END IF;
  IF c.queue = 'vtc' THEN
    UPDATE tenant SET ctr = ctr + (SELECT cost FROM job WHERE id = nl_start.job) / weight
      WHERE t = p_t RETURNING ctr INTO x;
    IF h IS NULL AND NOT EXISTS (SELECT 1 FROM tenant WHERE waiting > 0) THEN
      UPDATE cfg SET vlast = x;
    END IF;
  END IF;
END $$;

-- The next job by the discipline, started at `stamp`: (tenant, job), or
-- nulls when none may start.
CREATE FUNCTION nl_take(c cfg, stamp bigint, OUT tenant int, OUT job bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  r int; h bigint;
BEGIN
  IF c.queue = 'fifo' AND c.cap = nl_no_cap() THEN
    -- The post's default, exactly: the oldest queued row.
    SELECT j.tenant INTO tenant FROM job j WHERE state = 'q' AND id > c.taken ORDER BY id LIMIT 1
      FOR UPDATE SKIP LOCKED;
  ELSIF c.queue = 'vtc' THEN
    SELECT t INTO tenant FROM tenant WHERE vready ORDER BY ctr, t LIMIT 1;
    UPDATE tenant SET vready = false WHERE t = nl_take.tenant;
  ELSE
    SELECT t INTO tenant FROM tenant WHERE ready IS NOT NULL ORDER BY lane, ready LIMIT 1;
    UPDATE tenant SET ready = NULL WHERE t = nl_take.tenant;
  END IF;
  IF tenant IS NULL THEN RETURN; END IF;
  SELECT s.job, s.r, s.h INTO job, r, h FROM nl_start(c, tenant, stamp) s;
  IF c.queue = 'fifo' AND c.cap = nl_no_cap() THEN UPDATE cfg SET taken = job; END IF;
  IF h IS NOT NULL AND r < c.cap THEN
    PERFORM nl_ready(c, tenant, h);
  ELSIF h IS NOT NULL AND c.reserve >= 0 THEN
    UPDATE tenant SET capped = h WHERE t = nl_take.tenant;
  END IF;
END $$;

-- With lending: the oldest job of a tenant at its cap, started over it.
CREATE FUNCTION nl_take_over(c cfg, stamp bigint, OUT tenant int, OUT job bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  r int; h bigint;
BEGIN
  SELECT t INTO tenant FROM tenant WHERE capped IS NOT NULL ORDER BY capped LIMIT 1;
  IF tenant IS NULL THEN RETURN; END IF;
  SELECT s.job, s.r, s.h INTO job, r, h FROM nl_start(c, tenant, stamp) s;
  UPDATE tenant SET capped = h WHERE t = nl_take_over.tenant;
END $$;

-- What a worker asking now gets, `idle` workers being idle (itself too).
CREATE FUNCTION nl_next(c cfg, idle int, stamp bigint, OUT tenant int, OUT job bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
  SELECT n.tenant, n.job INTO tenant, job FROM nl_take(c, stamp) n;
  IF tenant IS NULL AND c.reserve >= 0 AND idle > c.reserve THEN
    SELECT n.tenant, n.job INTO tenant, job FROM nl_take_over(c, stamp) n;
  END IF;
END $$;

-- A running job of tenant p_t finished.
CREATE FUNCTION nl_finished(c cfg, p_t int) RETURNS void LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  w int; r int;
BEGIN
  UPDATE tenant SET running = running - 1 WHERE t = p_t RETURNING waiting, running INTO w, r;
  IF c.cap = nl_no_cap() OR c.cap - r <= 0 THEN RETURN; END IF;
  PERFORM nl_runnable(c, w, r + 1, w, r);
  IF r + 1 <> c.cap OR w = 0 THEN RETURN; END IF;
  IF c.reserve >= 0 THEN UPDATE tenant SET capped = NULL WHERE t = p_t; END IF;
  PERFORM nl_ready(c, p_t, (SELECT first FROM nl_heads(p_t)));
END $$;

-- Worker `me`'s next job, started at `stamp`; with none, `me` waits idle.
CREATE FUNCTION nl_hand_out(c cfg, me int, stamp bigint, OUT job bigint, OUT tenant int,
                            OUT lease bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
  IF c.queue <> 'halt' THEN
    SELECT n.job, n.tenant INTO job, tenant FROM nl_next(c, c.idle + 1, stamp) n;
  END IF;
  IF job IS NULL THEN
    -- Once: a call sent again after its connection dropped may find the
    -- worker in line already.
    INSERT INTO idle (worker, since) VALUES (me, nextval('tick')) ON CONFLICT (worker) DO NOTHING;
    IF FOUND THEN UPDATE cfg SET idle = cfg.idle + 1; END IF;
  ELSE
    lease := (SELECT lid FROM job j WHERE j.id = nl_hand_out.job);
  END IF;
END $$;

-- Wake the longest idle worker if a job that may start is not covered by a
-- wake on its way (see nl_wake_another): whether one was woken.
CREATE FUNCTION nl_wake(c cfg) RETURNS boolean LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE w int;
BEGIN
  IF c.idle = 0 OR NOT nl_wake_another(c) THEN RETURN false; END IF;
  DELETE FROM idle WHERE worker = (SELECT worker FROM idle ORDER BY since LIMIT 1)
    RETURNING worker INTO w;
  UPDATE cfg SET idle = idle - 1, pending = pending + 1;
  INSERT INTO woken VALUES (w);
  PERFORM pg_notify(c.channel || w, 'wake');
  RETURN true;
END $$;

-- Workers whose server process is gone (their process was killed) leave
-- the idle line, and the wakes sent to them go to others: how many wakes
-- were sent again.
CREATE FUNCTION nl_bury(c cfg) RETURNS int LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  gone_idle int; gone_woken int := 0; handed int := 0; n int := 0; g record; j bigint; t int;
BEGIN
  WITH gone AS (
    DELETE FROM idle i WHERE NOT EXISTS (
      SELECT 1 FROM worker w JOIN pg_stat_activity a ON a.pid = w.pid WHERE w.me = i.worker)
    RETURNING 1)
  SELECT count(*) INTO gone_idle FROM gone;
  -- For each dead worker woken for a handed job, the last job handed goes
  -- back to its queue, as when its lease runs out.
  FOR g IN DELETE FROM woken k WHERE NOT EXISTS (
      SELECT 1 FROM worker w JOIN pg_stat_activity a ON a.pid = w.pid WHERE w.me = k.worker)
    RETURNING k.handed LOOP
    IF NOT g.handed THEN
      gone_woken := gone_woken + 1;
      CONTINUE;
    END IF;
    SELECT h.job, h.tenant INTO j, t FROM nl_pick_up(NULL, false, NULL) h;
    IF j IS NOT NULL THEN
      PERFORM nl_requeue(c, j, t);
      handed := handed + 1;
    END IF;
  END LOOP;
  IF gone_idle + gone_woken + handed = 0 THEN RETURN 0; END IF;
  UPDATE cfg SET idle = idle - gone_idle, pending = pending - gone_woken RETURNING * INTO c;
  IF c.queue = 'halt' THEN RETURN 0; END IF;
  FOR k IN 1 .. gone_woken + handed LOOP
    EXIT WHEN NOT nl_wake(c);
    SELECT * INTO c FROM cfg;
    n := n + 1;
  END LOOP;
  RETURN n;
END $$;

-- A running job of tenant p_t goes back to its tenant's queue by its
-- number (its lease ran out), its cap slot freed; where that leaves the
-- tenant in its discipline's order is the in-process schedulers' rule.
CREATE FUNCTION nl_requeue(c cfg, p_job bigint, p_t int) RETURNS void LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  w int; r int; h bigint;
BEGIN
  SELECT waiting, running INTO w, r FROM tenant WHERE t = p_t; -- before
  IF c.queue = 'vtc' THEN
    UPDATE tenant SET ctr = ctr - (SELECT cost FROM job WHERE id = p_job) / weight WHERE t = p_t;
  END IF;
  UPDATE job SET state = 'q', until = NULL, redelivered = redelivered + 1 WHERE id = p_job;
  -- The takes seek past the last job started: this one is older again.
  UPDATE cfg SET queued = queued + 1, taken = least(taken, p_job - 1);
  UPDATE tenant SET waiting = waiting + 1, running = running - 1, last = least(last, p_job - 1)
    WHERE t = p_t;
  r := r - 1;
  IF c.cap <> nl_no_cap() THEN PERFORM nl_runnable(c, w, r + 1, w + 1, r); END IF;
  -- Its next job: this one, or an older one handed back before it.
  h := (SELECT first FROM nl_heads(p_t));
  IF w = 0 OR (r < c.cap AND r + 1 >= c.cap) THEN
    -- It was in no turn: nothing waiting, or at its cap and now below.
    IF c.reserve >= 0 AND w > 0 THEN UPDATE tenant SET capped = NULL WHERE t = p_t; END IF;
    IF r >= c.cap THEN
      IF c.reserve >= 0 THEN UPDATE tenant SET capped = h WHERE t = p_t; END IF;
    ELSIF c.queue = 'fair' AND w = 0 THEN
      UPDATE tenant SET lane = 0, ready = nextval('tick') WHERE t = p_t;
    ELSE
      PERFORM nl_ready(c, p_t, h);
    END IF;
  ELSIF c.queue = 'fifo' AND r < c.cap AND c.cap <> nl_no_cap() THEN
    -- In line by its next job.
    UPDATE tenant SET ready = h WHERE t = p_t AND ready IS NOT NULL;
  ELSIF c.reserve >= 0 AND r >= c.cap THEN
    UPDATE tenant SET capped = h WHERE t = p_t AND capped IS NOT NULL;
  END IF;
END $$;

-- Every job whose lease ran out by `stamp` back in its queue, and idle
-- workers woken for them: how many.
CREATE FUNCTION nl_reap(c cfg, stamp bigint) RETURNS int LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  j record; n int := 0;
BEGIN
  IF c.lease IS NULL THEN RETURN 0; END IF;
  FOR j IN SELECT id, tenant FROM job WHERE state = 'r' AND until <= stamp ORDER BY until, id LOOP
    PERFORM nl_requeue(c, j.id, j.tenant);
    SELECT * INTO c FROM cfg;
    n := n + 1;
  END LOOP;
  IF c.queue <> 'halt' THEN
    FOR k IN 1 .. n LOOP
      EXIT WHEN NOT nl_wake(c);
      SELECT * INTO c FROM cfg;
    END LOOP;
  END IF;
  RETURN n;
END $$;

-- Whether a submit should wake one more idle worker: jobs that may start
-- now (and, lending with more than `reserve` idle, the capped ones too)
-- that no wake on its way covers yet.
CREATE FUNCTION nl_wake_another(c cfg) RETURNS boolean LANGUAGE sql AS $$
  SELECT CASE WHEN c.cap = nl_no_cap() OR (c.reserve >= 0 AND c.idle > c.reserve)
              THEN c.queued ELSE c.runnable END > c.pending
$$;

-- setup(queue, cap, limit, reserve, channel, weights, durations): a new
-- queue (any old one's rows gone); cap, limit, reserve < 0: none. vtc's
-- weights by tenant (absent or 1: weight 1). Workers hear on channel || N.
CREATE FUNCTION noisylab_setup(p_queue text, p_cap int, p_limit int, p_reserve int,
                               p_channel text, p_weights float8[], p_durations bigint[])
RETURNS void LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
  IF p_queue NOT IN ('fifo', 'fair', 'vtc') THEN
    RAISE EXCEPTION 'noisylab: unknown queue %, expected fifo, fair or vtc', p_queue;
  END IF;
  TRUNCATE cfg, plan, job, tenant, idle, figures, woken, handed;
  ALTER SEQUENCE tick RESTART;
  INSERT INTO cfg (queue, cap, qlimit, reserve, channel) VALUES (
    p_queue,
    CASE WHEN p_cap < 0 THEN nl_no_cap() ELSE p_cap END,
    CASE WHEN p_limit < 0 THEN nl_no_cap() ELSE p_limit END,
    p_reserve, p_channel);
  INSERT INTO plan VALUES (coalesce(p_durations, '{}'));
  INSERT INTO tenant (t, weight)
    SELECT k - 1, w FROM unnest(p_weights) WITH ORDINALITY AS u(w, k) WHERE w <> 1;
END $$;

-- join(): a new worker's number; it LISTENs on the schema's name || '_' ||
-- number, then counts itself in (SELECT noisylab_ready(number)).
CREATE FUNCTION noisylab_join() RETURNS int LANGUAGE sql
AS $$ SELECT nextval('worker_id')::int $$;

CREATE FUNCTION noisylab_ready(me int) RETURNS bigint LANGUAGE sql AS $$
  INSERT INTO worker (me, pid) VALUES (me, pg_backend_pid());
  SELECT nextval('worker_ready');
$$;

-- rejoin(me): worker `me` connected again (the server dropped its
-- connection): its new server process registered; true if a wake was sent
-- to it meanwhile (lost with the connection: its next take is a woken
-- one), else it leaves the idle line, so its next take counts it again.
CREATE FUNCTION noisylab_rejoin(p_me int) RETURNS boolean LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
  PERFORM nl_lock();
  UPDATE worker SET pid = pg_backend_pid() WHERE me = p_me;
  IF EXISTS (SELECT 1 FROM woken WHERE worker = p_me) THEN RETURN true; END IF;
  DELETE FROM idle WHERE worker = p_me;
  IF FOUND THEN UPDATE cfg SET idle = idle - 1; END IF;
  RETURN false;
END $$;

-- take(me, woken): worker `me` asks for a job, at the run's start (false)
-- or woken (true): (job, tenant, lease), or nulls (it is idle: wait for a
-- wake).
CREATE FUNCTION noisylab_take(me int, woken boolean, OUT job bigint, OUT tenant int,
                              OUT lease bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  c cfg := nl_lock();
  stamp bigint := nl_now();
  was_handed boolean := false;
BEGIN
  IF woken THEN
    DELETE FROM woken w WHERE w.worker = me RETURNING w.handed INTO was_handed;
    IF FOUND AND NOT was_handed THEN UPDATE cfg SET pending = pending - 1 RETURNING * INTO c; END IF;
  END IF;
  IF nl_reap(c, stamp) > 0 THEN SELECT * INTO c FROM cfg; END IF;
  -- Woken for a job a submit handed out: the first one handed, which
  -- starts now, its lease with it.
  IF was_handed THEN
    SELECT h.job, h.tenant, h.lease INTO job, tenant, lease FROM nl_pick_up(stamp, true, c.lease) h;
    IF job IS NOT NULL THEN RETURN; END IF;
  END IF;
  SELECT h.job, h.tenant, h.lease INTO job, tenant, lease FROM nl_hand_out(c, me, stamp) h;
END $$;

-- finish(me, job, tenant, lease): the job is done; the same worker's next
-- job. With leases, a finish that reaches the server at or after its
-- lease's instant is refused (job.late), whether or not a call reaped the
-- lease before it (the reap runs first; the rule of the Redis functions
-- and of the model); one that went through already (sent again) is
-- ignored.
CREATE FUNCTION noisylab_finish(me int, p_job bigint, p_t int, p_lease bigint,
                                OUT job bigint, OUT tenant int, OUT lease bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  c cfg := nl_lock();
  stamp bigint := nl_now();
  n bigint;
BEGIN
  IF nl_reap(c, stamp) > 0 THEN SELECT * INTO c FROM cfg; END IF;
  UPDATE job j SET state = 'f', finished = stamp
    WHERE j.id = p_job AND j.state = 'r' AND (c.lease IS NULL OR j.lid = p_lease);
  IF FOUND THEN
    PERFORM nl_finished(c, p_t);
    UPDATE cfg SET done = done + 1 RETURNING done INTO n;
    IF n = c.expect THEN PERFORM pg_notify(c.channel || 'end', ''); END IF;
  ELSIF c.lease IS NULL THEN
    RAISE EXCEPTION 'noisylab: job % is not running', p_job;
  ELSIF NOT EXISTS (SELECT 1 FROM job j WHERE j.id = p_job AND j.state = 'f' AND j.lid = p_lease) THEN
    UPDATE job j SET late = late + 1 WHERE j.id = p_job;
  END IF;
  SELECT * INTO c FROM cfg;
  SELECT h.job, h.tenant, h.lease INTO job, tenant, lease FROM nl_hand_out(c, me, stamp) h;
END $$;

-- lease(µs): this run's takes lease their jobs for that long (after
-- setup; NULL: no lease).
CREATE FUNCTION noisylab_lease(p_lease bigint) RETURNS void LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
  PERFORM nl_lock();
  UPDATE cfg SET lease = p_lease;
END $$;

-- renew(job, lease): the worker still holds the job: its lease runs on
-- from now; false if it had run out (the job is another's now).
CREATE FUNCTION noisylab_renew(p_job bigint, p_lease bigint) RETURNS boolean LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  c cfg := nl_lock();
  stamp bigint := nl_now();
BEGIN
  PERFORM nl_reap(c, stamp);
  UPDATE job j SET until = stamp + c.lease, renewed = renewed + 1
    WHERE j.id = p_job AND j.state = 'r' AND j.lid = p_lease;
  RETURN FOUND;
END $$;

-- reap(): the jobs whose lease ran out back in their queues now, and the
-- dead workers out of the idle line: how many jobs (the coordinator's,
-- for a queue nobody calls: every worker gone).
CREATE FUNCTION noisylab_reap() RETURNS int LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE c cfg := nl_lock();
BEGIN
  PERFORM nl_bury(c);
  SELECT * INTO c FROM cfg;
  RETURN nl_reap(c, nl_now());
END $$;

-- expect(n): the submitter accepted n jobs in all; channel || 'end' hears
-- once n have finished.
CREATE FUNCTION noisylab_expect(n bigint) RETURNS void LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE c cfg := nl_lock();
BEGIN
  UPDATE cfg SET expect = n;
  IF c.done >= n THEN PERFORM pg_notify(c.channel || 'end', ''); END IF;
END $$;

-- accepted(): the submits this run accepted, by the job table's rows (a
-- refused submit's row, state x, is not one): what a restart is checked
-- against.
CREATE FUNCTION noisylab_accepted() RETURNS bigint
LANGUAGE sql AS $$ SELECT count(*) FROM job WHERE state <> 'x' $$;

-- halt(): the run is over early (Ctrl-C, a failure): workers get no more
-- jobs, only their current one finishes.
CREATE FUNCTION noisylab_halt() RETURNS void LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
  PERFORM nl_lock();
  UPDATE cfg SET queue = 'halt';
END $$;

-- The scheduler alone, for the equivalence tests: push (submit.sql);
-- pop(idle) -> (tenant, job) or nulls; done(tenant) as a finish.
CREATE FUNCTION noisylab_pop(p_idle int, OUT tenant int, OUT job bigint)
LANGUAGE sql AS $$ SELECT * FROM nl_next(nl_lock(), p_idle, nl_now()) $$;

CREATE FUNCTION noisylab_done(p_t int) RETURNS void
LANGUAGE sql AS $$ SELECT nl_finished(nl_lock(), p_t) $$;

-- back(tenant, job): a running job handed back as when its lease runs out.
CREATE FUNCTION noisylab_back(p_t int, p_job bigint) RETURNS void
LANGUAGE sql AS $$ SELECT nl_requeue(nl_lock(), p_job, p_t) $$;
