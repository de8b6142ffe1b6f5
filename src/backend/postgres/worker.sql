-- noisylab's queue on PostgreSQL, the workers' calls (after noisylab.sql):
-- join and ready, rejoin after a dropped connection, take, finish (which
-- hands back the next job), steps (the calls of a process's workers sent
-- together), lease and renew. Each takes the queue's lock (nl_lock) and
-- writes its row once (nl_save).

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

-- Worker `me`, calling, out of the woken line: whether it was woken for
-- a job a submit handed out. A worker that calls has heard any wake sent
-- to it, whatever its call says: a call sent again after its connection
-- dropped may follow a wake lost with that connection, and a worker left
-- both woken and idle would be woken twice.
CREATE FUNCTION nl_unwake(INOUT c cfg, me int, OUT was_handed boolean) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
  DELETE FROM woken w WHERE w.worker = me RETURNING w.handed INTO was_handed;
  IF FOUND AND NOT was_handed THEN c.pending := c.pending - 1; END IF;
  was_handed := coalesce(was_handed, false);
END $$;

-- Worker `me`'s next job at `stamp`, the queue locked: woken for a job a
-- submit handed out (`was_handed`), the first one handed, which starts
-- now, its lease with it; else the discipline's next (nl_hand_out).
CREATE FUNCTION nl_next_for(INOUT c cfg, me int, was_handed boolean, stamp bigint,
                            OUT job bigint, OUT tenant int, OUT lease bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE s record;
BEGIN
  IF was_handed THEN
    SELECT h.job, h.tenant, h.lease INTO job, tenant, lease FROM nl_pick_up(stamp, true, c.lease, NULL) h;
  END IF;
  IF job IS NULL THEN
    s := nl_hand_out(c, me, stamp);
    c := s.c; job := s.job; tenant := s.tenant; lease := s.lease;
  END IF;
END $$;

-- Worker `me` asks for a job at `stamp`, at the run's start (`woken`
-- false) or woken (true), the queue locked: (job, tenant, lease), or nulls
-- (it is idle: it waits for a wake). The woken line, not `woken`, says
-- whether a wake was sent to it (nl_unwake); `woken` is what the worker
-- heard.
CREATE FUNCTION nl_take_call(INOUT c cfg, me int, woken boolean, stamp bigint, OUT job bigint,
                             OUT tenant int, OUT lease bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  u record := nl_unwake(c, me);
  s record;
BEGIN
  c := (nl_reap(u.c, stamp)).c;
  s := nl_next_for(c, me, u.was_handed, stamp);
  c := s.c; job := s.job; tenant := s.tenant; lease := s.lease;
END $$;

-- Worker `me`'s job p_job of tenant p_t, taken with lease p_lease, is done
-- at `stamp`, the queue locked: the same worker's next job. With leases, a
-- finish that reaches the server at or after its lease's instant is
-- refused (job.late), whether or not a call reaped the lease before it
-- (the reap runs first; the rule of the Redis functions and of the model);
-- one that went through already (sent again) is ignored.
CREATE FUNCTION nl_finish_call(INOUT c cfg, me int, p_job bigint, p_t int, p_lease bigint,
                               stamp bigint, OUT job bigint, OUT tenant int, OUT lease bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  u record := nl_unwake(c, me);
  s record;
BEGIN
  c := (nl_reap(u.c, stamp)).c;
  UPDATE job j SET state = 'f', finished = stamp
    WHERE j.id = p_job AND j.state = 'r' AND (c.lease IS NULL OR j.lid = p_lease);
  IF FOUND THEN
    c := nl_finished(c, p_t);
    c.done := c.done + 1;
    IF c.done = c.expect THEN PERFORM pg_notify(c.channel || 'end', ''); END IF;
  ELSIF c.lease IS NULL THEN
    RAISE EXCEPTION 'noisylab: job % is not running', p_job;
  ELSIF NOT EXISTS (SELECT 1 FROM job j WHERE j.id = p_job AND j.state = 'f' AND j.lid = p_lease) THEN
    UPDATE job j SET late = late + 1 WHERE j.id = p_job;
  END IF;
  s := nl_next_for(c, me, u.was_handed, stamp);
  c := s.c; job := s.job; tenant := s.tenant; lease := s.lease;
END $$;

-- take(me, woken): worker `me` asks for a job (nl_take_call), in a call of
-- its own.
CREATE FUNCTION noisylab_take(me int, woken boolean, OUT job bigint, OUT tenant int,
                              OUT lease bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  c cfg := nl_lock();
  s record := nl_take_call(c, me, woken, nl_now());
BEGIN
  PERFORM nl_save(s.c);
  job := s.job; tenant := s.tenant; lease := s.lease;
END $$;

-- finish(me, job, tenant, lease): the job is done (nl_finish_call), in a
-- call of its own: the same worker's next job.
CREATE FUNCTION noisylab_finish(me int, p_job bigint, p_t int, p_lease bigint,
                                OUT job bigint, OUT tenant int, OUT lease bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  c cfg := nl_lock();
  s record := nl_finish_call(c, me, p_job, p_t, p_lease, nl_now());
BEGIN
  PERFORM nl_save(s.c);
  job := s.job; tenant := s.tenant; lease := s.lease;
END $$;

-- steps(me[], woken[], job[], tenant[], lease[]): the calls of several
-- workers (the threads of one process, sent together while another of
-- theirs is on its way) in one transaction, the lock taken and the queue's
-- row written once for all: step i is worker me[i]'s take (job[i] NULL:
-- as take(me[i], woken[i])) or its finish (as finish(me[i], job[i],
-- tenant[i], lease[i])), each stamped when its turn comes, in the order
-- given, so the queue ends as after the same calls sent one by one. One
-- row a step, in that order: (me, job, tenant, lease), nulls for no job.
CREATE FUNCTION noisylab_steps(p_me int[], p_woken boolean[], p_job bigint[], p_t int[],
                               p_lease bigint[])
RETURNS TABLE (me int, job bigint, tenant int, lease bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  c cfg := nl_lock();
  n int := coalesce(array_length(p_me, 1), 0);
  s record;
BEGIN
  IF coalesce(array_length(p_woken, 1), 0) <> n OR coalesce(array_length(p_job, 1), 0) <> n
     OR coalesce(array_length(p_t, 1), 0) <> n OR coalesce(array_length(p_lease, 1), 0) <> n THEN
    RAISE EXCEPTION 'noisylab: steps takes five arrays of one length (workers, woken, jobs, tenants, leases)';
  END IF;
  FOR i IN 1 .. n LOOP
    IF p_job[i] IS NULL THEN
      s := nl_take_call(c, p_me[i], p_woken[i], nl_now());
    ELSE
      s := nl_finish_call(c, p_me[i], p_job[i], p_t[i], p_lease[i], nl_now());
    END IF;
    c := s.c;
    me := p_me[i]; job := s.job; tenant := s.tenant; lease := s.lease;
    RETURN NEXT;
  END LOOP;
  PERFORM nl_save(c);
END $$;

-- lease(µs): this run's takes lease their jobs for that long (after
-- setup; NULL: no lease).
CREATE FUNCTION noisylab_lease(p_lease bigint) RETURNS void LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
  PERFORM nl_lock();
  UPDATE cfg SET lease = p_lease, due = NULL;
END $$;

-- renew(job, lease): the worker still holds the job: its lease runs on
-- from now; false if it had run out (the job is another's now).
CREATE FUNCTION noisylab_renew(p_job bigint, p_lease bigint) RETURNS boolean LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  c cfg := nl_lock();
  stamp bigint := nl_now();
  s record := nl_reap(c, stamp);
BEGIN
  IF s.n > 0 THEN PERFORM nl_save(s.c); END IF;
  UPDATE job j SET until = stamp + c.lease, renewed = renewed + 1
    WHERE j.id = p_job AND j.state = 'r' AND j.lid = p_lease;
  RETURN FOUND;
END $$;
