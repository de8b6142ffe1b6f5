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
-- tenants, costs): one call, one transaction (submit.sql). A process of
-- many workers may send their takes and finishes together, in one call
-- (noisylab_steps) while others of theirs are on their way (worker.sql,
-- after this file, then submit.sql).
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
-- the tenant whose start last left nobody with work), due (with leases,
-- above).
--
-- Concurrency. Every call first takes the queue's lock (a transaction
-- advisory lock keyed by the cfg table's oid: a schema's queue, its own
-- lock), then reads cfg, so its few statements see and leave a consistent
-- queue, as a Redis function runs alone: no job is taken twice, no tenant
-- passes its cap, no deadlock (one lock, always taken first). It keeps
-- cfg's counters in memory and writes the row once, at its end (nl_save).
-- Each call is one short transaction, the lock held through its commit.
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
-- calls), looking for them only once the server's clock reaches cfg.due,
-- the earliest a running job's lease can run out (a take lowers it to its
-- lease's end; a renewal only pushes an end later): back in their
-- tenant's queue by their own number, so before every job of it that
-- never started (fifo serves such a job by its own arrival; fair in its
-- tenant's turn, the tenant a newcomer if it had nothing else waiting;
-- vtc refunds the start's charge and does not lift the counter), their
-- cap slot freed, and an idle worker woken for each.
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
  lease     bigint,
  -- With leases: no running job's lease runs out before this (NULL: not
  -- known); a call reaps only from then.
  due       bigint
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
-- each; alive, those whose server process is there (one gone is dead).
CREATE TABLE worker (me int PRIMARY KEY, pid int NOT NULL);
CREATE VIEW alive AS SELECT w.me FROM worker w JOIN pg_stat_activity a ON a.pid = w.pid;
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

-- The queue, locked for this call: its cfg row, which the call's functions
-- change in memory (their INOUT c) and nl_save writes back once.
CREATE FUNCTION nl_lock() RETURNS cfg LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE c cfg;
BEGIN
  PERFORM pg_advisory_xact_lock('cfg'::regclass::oid::bigint);
  SELECT * INTO c FROM cfg;
  IF NOT FOUND THEN RAISE EXCEPTION 'noisylab: no queue here: call noisylab_setup first'; END IF;
  RETURN c;
END $$;

-- The counters a call changed, written back at its end: one new version
-- of the row a call (each update of the row leaves one, which the next
-- calls walk past until a vacuum).
CREATE FUNCTION nl_save(c cfg) RETURNS void LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
  UPDATE cfg SET queued = c.queued, runnable = c.runnable, idle = c.idle, pending = c.pending,
    done = c.done, vlast = c.vlast, taken = c.taken, newest = c.newest, due = c.due;
END $$;

-- How many of a tenant's w waiting jobs may start with r running.
CREATE FUNCTION nl_startable(c cfg, w int, r int) RETURNS bigint IMMUTABLE LANGUAGE sql
AS $$ SELECT greatest(0, least(w, c.cap - r))::bigint $$;

-- With a cap, how cfg.runnable changes as a tenant goes (w0, r0) -> (w1, r1).
CREATE FUNCTION nl_runnable(c cfg, w0 int, r0 int, w1 int, r1 int) RETURNS bigint IMMUTABLE
LANGUAGE sql AS $$
  SELECT CASE WHEN c.cap = nl_no_cap() THEN 0
              ELSE nl_startable(c, w1, r1) - nl_startable(c, w0, r0) END
$$;

-- A tenant's oldest waiting job after `after` (NULL: its last started).
--   Limit -> Index Only Scan using job_tenant_queued on job
--            Index Cond: ((tenant = $1) AND (id > $2))
CREATE FUNCTION nl_head(p_t int, after bigint) RETURNS bigint LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
  IF after IS NULL THEN after := (SELECT last FROM tenant WHERE t = p_t); END IF;
  RETURN (SELECT min(id) FROM job WHERE tenant = p_t AND state = 'q' AND id > after);
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

-- Start the tenant's oldest job at `stamp`: it, its lease, and the
-- tenant's waiting and running counts after (vtc charges the job's cost ÷
-- weight). The tenant's place in its discipline's order changes in the
-- same statement: a take (`over` false) puts it back in line if it may
-- start another job (fair: at the back; fifo: by its next job; vtc: still
-- ready), else out of line (with lending, first to lend to by its next job
-- if at its cap); a start over its cap (`over`) leaves it first to lend to
-- by its next job.
CREATE FUNCTION nl_start(INOUT c cfg, p_t int, stamp bigint, over boolean, OUT job bigint,
                         OUT lease bigint, OUT w int, OUT r int) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  cost float8; x float8;
  fifo boolean := c.queue = 'fifo' AND c.cap <> nl_no_cap();
BEGIN
  UPDATE job j SET state = 'r', started = stamp,
      lid = CASE WHEN c.lease IS NULL THEN j.lid ELSE nextval('lease_id') END,
      until = stamp + c.lease
    WHERE j.id = (SELECT min(id) FROM job q WHERE q.tenant = p_t AND q.state = 'q'
                    AND q.id > (SELECT last FROM tenant WHERE t = p_t))
    RETURNING j.id, j.cost, j.lid INTO job, cost, lease;
  UPDATE tenant SET waiting = waiting - 1, running = running + 1, last = job,
      ctr = CASE WHEN c.queue = 'vtc' THEN ctr + cost / weight ELSE ctr END,
      lane = CASE WHEN c.queue = 'fair' AND NOT over THEN 1 ELSE lane END,
      ready = CASE WHEN over OR NOT (c.queue = 'fair' OR fifo) THEN ready
                   WHEN waiting > 1 AND running + 1 < c.cap THEN
                     CASE WHEN fifo THEN nl_head(p_t, job) ELSE nextval('tick') END
              END,
      vready = CASE WHEN c.queue = 'vtc' AND NOT over THEN waiting > 1 AND running + 1 < c.cap
                    ELSE vready END,
      capped = CASE WHEN over OR (c.reserve >= 0 AND waiting > 1 AND running + 1 >= c.cap)
                    THEN CASE WHEN waiting > 1 THEN nl_head(p_t, job) END
                    ELSE capped END
    WHERE t = p_t RETURNING waiting, running, ctr INTO w, r, x;
  c.queued := c.queued - 1;
  c.runnable := c.runnable + nl_runnable(c, w + 1, r - 1, w, r);
  IF c.due IS NOT NULL THEN c.due := least(c.due, stamp + c.lease); END IF;
  IF c.queue = 'vtc' AND w = 0 THEN
    IF NOT EXISTS (SELECT 1 FROM tenant WHERE waiting > 0) THEN c.vlast := x; END IF;
  END IF;
END $$;

-- The next job by the discipline, started at `stamp`: (tenant, job,
-- lease), or nulls when none may start.
CREATE FUNCTION nl_take(INOUT c cfg, stamp bigint, OUT tenant int, OUT job bigint,
                        OUT lease bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE s record;
BEGIN
  IF c.queue = 'fifo' AND c.cap = nl_no_cap() THEN
    -- The post's default, exactly: the oldest queued row.
    SELECT j.tenant INTO tenant FROM job j WHERE state = 'q' AND id > c.taken ORDER BY id LIMIT 1
      FOR UPDATE SKIP LOCKED;
  ELSIF c.queue = 'vtc' THEN
    SELECT t INTO tenant FROM tenant WHERE vready ORDER BY ctr, t LIMIT 1;
  ELSE
    SELECT t INTO tenant FROM tenant WHERE ready IS NOT NULL ORDER BY lane, ready LIMIT 1;
  END IF;
  IF tenant IS NULL THEN RETURN; END IF;
  s := nl_start(c, tenant, stamp, false);
  c := s.c; job := s.job; lease := s.lease;
  IF c.queue = 'fifo' AND c.cap = nl_no_cap() THEN c.taken := job; END IF;
END $$;

-- With lending: the oldest job of a tenant at its cap, started over it.
CREATE FUNCTION nl_take_over(INOUT c cfg, stamp bigint, OUT tenant int, OUT job bigint,
                             OUT lease bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE s record;
BEGIN
  SELECT t INTO tenant FROM tenant WHERE capped IS NOT NULL ORDER BY capped LIMIT 1;
  IF tenant IS NULL THEN RETURN; END IF;
  s := nl_start(c, tenant, stamp, true);
  c := s.c; job := s.job; lease := s.lease;
END $$;

-- What a worker asking now gets, `idle` workers being idle (itself too).
CREATE FUNCTION nl_next(INOUT c cfg, idle int, stamp bigint, OUT tenant int, OUT job bigint,
                        OUT lease bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE s record;
BEGIN
  s := nl_take(c, stamp);
  IF s.tenant IS NULL AND c.reserve >= 0 AND idle > c.reserve THEN
    s := nl_take_over(c, stamp);
  END IF;
  c := s.c; tenant := s.tenant; job := s.job; lease := s.lease;
END $$;

-- A running job of tenant p_t finished: at its cap with work waiting, it
-- is back in line (out of lending's), in the same statement.
CREATE FUNCTION nl_finished(INOUT c cfg, p_t int) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  w int; r int;
BEGIN
  UPDATE tenant SET running = running - 1,
      lane = CASE WHEN running = c.cap AND waiting > 0 AND c.queue = 'fair' THEN 1 ELSE lane END,
      ready = CASE WHEN running <> c.cap OR waiting = 0 OR c.queue = 'vtc' THEN ready
                   WHEN c.queue = 'fair' THEN nextval('tick') ELSE nl_head(p_t, NULL) END,
      vready = CASE WHEN running = c.cap AND waiting > 0 AND c.queue = 'vtc' THEN true ELSE vready END,
      capped = CASE WHEN running = c.cap AND waiting > 0 AND c.reserve >= 0 THEN NULL ELSE capped END
    WHERE t = p_t RETURNING waiting, running INTO w, r;
  c.runnable := c.runnable + nl_runnable(c, w, r + 1, w, r);
END $$;

-- Worker `me`'s next job, started at `stamp`; with none, `me` waits idle.
CREATE FUNCTION nl_hand_out(INOUT c cfg, me int, stamp bigint, OUT job bigint, OUT tenant int,
                            OUT lease bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE s record;
BEGIN
  IF c.queue <> 'halt' THEN
    s := nl_next(c, c.idle + 1, stamp);
    c := s.c; job := s.job; tenant := s.tenant; lease := s.lease;
  END IF;
  IF job IS NULL THEN
    -- Once: a call sent again after its connection dropped may find the
    -- worker in line already.
    INSERT INTO idle (worker, since) VALUES (me, nextval('tick')) ON CONFLICT (worker) DO NOTHING;
    IF FOUND THEN c.idle := c.idle + 1; END IF;
  ELSIF EXISTS (SELECT 1 FROM handed h WHERE h.tenant = tenant) THEN
    -- A job of the same tenant handed out and not picked up yet started
    -- first: `me` runs it now, and the worker woken for it picks this one
    -- up (a tenant's jobs start in their order even when that worker is
    -- slow to hear). Another tenant's job handed out stays with the worker
    -- woken for it, as in the model, where it started at its submit on the
    -- worker it went to: `me` goes on with the discipline's next.
    INSERT INTO handed VALUES (nextval('tick'), job, tenant, lease);
    SELECT h.job, h.tenant, h.lease INTO job, tenant, lease
      FROM nl_pick_up(stamp, true, c.lease, tenant) h;
  END IF;
END $$;

-- Wake the longest idle worker if a job that may start is not covered by a
-- wake on its way (see nl_wake_another): whether one was woken.
CREATE FUNCTION nl_wake(INOUT c cfg, OUT woke boolean) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE w int;
BEGIN
  woke := c.idle > 0 AND nl_wake_another(c);
  IF NOT woke THEN RETURN; END IF;
  DELETE FROM idle WHERE worker = (SELECT worker FROM idle ORDER BY since LIMIT 1)
    RETURNING worker INTO w;
  c.idle := c.idle - 1;
  c.pending := c.pending + 1;
  INSERT INTO woken VALUES (w);
  PERFORM pg_notify(c.channel || w, 'wake');
END $$;

-- Wake up to n idle workers, one at a time while a job needs one.
CREATE FUNCTION nl_wake_up_to(INOUT c cfg, n int) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE s record;
BEGIN
  IF c.queue = 'halt' THEN RETURN; END IF;
  FOR k IN 1 .. n LOOP
    s := nl_wake(c);
    c := s.c;
    EXIT WHEN NOT s.woke;
  END LOOP;
END $$;

-- Workers whose server process is gone (their process was killed) leave
-- the idle line, and the wakes sent to them go to others.
CREATE FUNCTION nl_bury(INOUT c cfg) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  gone_idle int; gone_woken int := 0; handed int := 0; g record; j bigint; t int;
BEGIN
  WITH gone AS (
    DELETE FROM idle i WHERE NOT EXISTS (SELECT 1 FROM alive WHERE me = i.worker) RETURNING 1)
  SELECT count(*) INTO gone_idle FROM gone;
  -- For each dead worker woken for a handed job, the last job handed goes
  -- back to its queue, as when its lease runs out.
  FOR g IN DELETE FROM woken k WHERE NOT EXISTS (SELECT 1 FROM alive WHERE me = k.worker)
    RETURNING k.handed LOOP
    IF NOT g.handed THEN
      gone_woken := gone_woken + 1;
      CONTINUE;
    END IF;
    SELECT h.job, h.tenant INTO j, t FROM nl_pick_up(NULL, false, NULL, NULL) h;
    IF j IS NOT NULL THEN
      c := nl_requeue(c, j, t);
      handed := handed + 1;
    END IF;
  END LOOP;
  c.idle := c.idle - gone_idle;
  c.pending := c.pending - gone_woken;
  c := nl_wake_up_to(c, gone_woken + handed);
END $$;

-- A running job of tenant p_t goes back to its tenant's queue by its
-- number (its lease ran out), its cap slot freed; where that leaves the
-- tenant in its discipline's order is the in-process schedulers' rule.
CREATE FUNCTION nl_requeue(INOUT c cfg, p_job bigint, p_t int) LANGUAGE plpgsql AS $$
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
  c.queued := c.queued + 1;
  c.taken := least(c.taken, p_job - 1);
  UPDATE tenant SET waiting = waiting + 1, running = running - 1, last = least(last, p_job - 1)
    WHERE t = p_t;
  r := r - 1;
  c.runnable := c.runnable + nl_runnable(c, w, r + 1, w + 1, r);
  -- Its next job: this one, or an older one handed back before it.
  h := nl_head(p_t, NULL);
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
--   Index Scan using job_leased on job  Index Cond: (until <= $1)
CREATE FUNCTION nl_reap(INOUT c cfg, stamp bigint, OUT n int) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE j record;
BEGIN
  n := 0;
  IF c.lease IS NULL OR stamp < c.due THEN RETURN; END IF;
  FOR j IN SELECT id, tenant FROM job WHERE state = 'r' AND until <= stamp ORDER BY until, id LOOP
    c := nl_requeue(c, j.id, j.tenant);
    n := n + 1;
  END LOOP;
  --   Limit -> Index Only Scan using job_leased on job
  c.due := coalesce((SELECT min(until) FROM job WHERE state = 'r'), 9223372036854775807);
  IF n > 0 THEN c := nl_wake_up_to(c, n); END IF;
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

-- reap(): the jobs whose lease ran out back in their queues now, and the
-- dead workers out of the idle line: how many jobs (the coordinator's,
-- for a queue nobody calls: every worker gone).
-- It looks first without the lock, so that the workers' calls never wait
-- behind one with nothing to do (one missed then is found at the next).
CREATE FUNCTION noisylab_reap() RETURNS int LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  stamp bigint := nl_now(); s record;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM job WHERE state = 'r' AND until <= stamp)
     AND NOT EXISTS (SELECT 1 FROM (SELECT worker FROM idle UNION ALL SELECT worker FROM woken) k
                     WHERE NOT EXISTS (SELECT 1 FROM alive WHERE me = k.worker)) THEN
    RETURN 0;
  END IF;
  s := nl_reap(nl_bury(nl_lock()), nl_now());
  PERFORM nl_save(s.c);
  RETURN s.n;
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
CREATE FUNCTION noisylab_pop(p_idle int, OUT tenant int, OUT job bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE s record := nl_next(nl_lock(), p_idle, nl_now());
BEGIN
  PERFORM nl_save(s.c);
  tenant := s.tenant; job := s.job;
END $$;

CREATE FUNCTION noisylab_done(p_t int) RETURNS void LANGUAGE sql
AS $$ SELECT nl_save(nl_finished(nl_lock(), p_t)) $$;

-- back(tenant, job): a running job handed back as when its lease runs out.
CREATE FUNCTION noisylab_back(p_t int, p_job bigint) RETURNS void LANGUAGE sql
AS $$ SELECT nl_save(nl_requeue(nl_lock(), p_job, p_t)) $$;
