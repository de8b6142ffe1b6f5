-- noisylab's submits on PostgreSQL (after noisylab.sql, whose tables and
-- functions these use): one job, or every job due at one instant in one
-- call and one transaction.
--
-- A submit hands each job that may start at once to an idle worker, as the
-- model's idle worker takes a job the instant it comes: the job is started
-- for the longest idle worker (by the discipline, so not always the job
-- just queued), the worker leaves the idle line and hears 'wake' on its
-- channel, and its woken take returns that job, stamped started then. A
-- burst's queue limit therefore counts the jobs handed out as it came, as
-- the model does, not only those taken after the submit's commit.
--
-- The jobs of a burst go through the submit one by one (the push, then the
-- hand-offs it allows) only while a hand-off can still follow: while
-- workers are idle and a job still to come could make one start. The rest
-- enter in a few set-based statements (nl_push_rest), in a second call
-- when the first handed jobs out (so that they start without waiting for
-- the rest): their rows in one INSERT, each tenant's counters once, the
-- queue's counters once. Row by row, a burst would update the same cfg and
-- tenant rows once a job in one transaction, and each update walks the
-- versions the transaction left before it: 2,000 jobs cost seconds, not
-- milliseconds.

-- Tenant p_t, with w jobs waiting and r running, gets `a` more, the first
-- `head`: its counters, and its place in its discipline's order if it had
-- nothing waiting (vtc lifts its counter to the lowest among tenants with
-- work or, with none, the last one's: a tenant with nothing waiting banks
-- no credit).
CREATE FUNCTION nl_enter(INOUT c cfg, p_t int, w int, r int, a int, head bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE lo float8; x float8;
BEGIN
  c.queued := c.queued + a;
  c.runnable := c.runnable + nl_runnable(c, w, r, w + a, r);
  IF c.queue = 'vtc' AND w = 0 THEN
    SELECT ctr INTO lo FROM tenant WHERE waiting > 0 ORDER BY ctr LIMIT 1;
    SELECT greatest(ctr, coalesce(lo, c.vlast)) INTO x FROM tenant WHERE t = p_t;
    UPDATE tenant SET ctr = x WHERE t = p_t;
  END IF;
  IF w = 0 AND r < c.cap AND c.queue = 'fair' THEN
    UPDATE tenant SET waiting = a, lane = 0, ready = nextval('tick') WHERE t = p_t;
    RETURN;
  END IF;
  UPDATE tenant SET waiting = waiting + a WHERE t = p_t;
  IF w = 0 AND r < c.cap THEN
    PERFORM nl_ready(c, p_t, head);
  ELSIF w = 0 AND c.reserve >= 0 THEN
    UPDATE tenant SET capped = head WHERE t = p_t;
  END IF;
END $$;

-- Queue a job (of `cost`, charged by vtc when it starts) at `stamp`, or
-- refuse it when its tenant has `qlimit` waiting: (true, 0) or (false,
-- waiting).
CREATE FUNCTION nl_push(INOUT c cfg, p_job bigint, p_t int, p_cost float8, stamp bigint,
                        OUT ok boolean, OUT waiting int) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE r int;
BEGIN
  IF p_job <= c.newest THEN
    RAISE EXCEPTION 'noisylab: job % is not newer than the last submitted (%): numbers must grow with submits',
      p_job, c.newest;
  END IF;
  c.newest := p_job;
  SELECT tenant.waiting, running INTO waiting, r FROM tenant WHERE t = p_t;
  IF NOT FOUND THEN
    INSERT INTO tenant (t) VALUES (p_t);
    waiting := 0; r := 0;
  END IF;
  IF waiting >= c.qlimit THEN
    INSERT INTO job (id, tenant, state, enqueued) VALUES (p_job, p_t, 'x', stamp);
    ok := false;
    RETURN;
  END IF;
  INSERT INTO job (id, tenant, cost, state, enqueued) VALUES (p_job, p_t, p_cost, 'q', stamp);
  c := nl_enter(c, p_t, waiting, r, 1, p_job);
  ok := true;
  waiting := 0;
END $$;

-- The push of jobs p_ids (of tenants p_ts, costs p_costs), in order, at
-- `stamp`, while no hand-off can follow any of them: what nl_push gives
-- each, job by job, in set-based statements. A tenant's jobs are accepted
-- up to its limit, the rest refused; its counters and its place in its
-- discipline's order change once, in the order tenants first appear (the
-- order vtc's lift and fair's newcomer lane see them in).
CREATE FUNCTION nl_push_rest(INOUT c cfg, p_ids bigint[], p_ts int[], p_costs float8[], stamp bigint,
                             OUT oks boolean[], OUT xs int[]) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  d record; w int; r int; a int;
  ts int[] := '{}'; acc int[] := '{}'; w0 int[] := '{}';
BEGIN
  FOR d IN SELECT u.t, count(*)::int AS k, (array_agg(u.id ORDER BY u.n))[1] AS head
           FROM unnest(p_ids, p_ts) WITH ORDINALITY AS u(id, t, n) GROUP BY u.t ORDER BY min(u.n) LOOP
    SELECT tenant.waiting, running INTO w, r FROM tenant WHERE t = d.t;
    IF NOT FOUND THEN
      INSERT INTO tenant (t) VALUES (d.t);
      w := 0; r := 0;
    END IF;
    a := greatest(0, least(d.k, c.qlimit - w));
    ts := ts || d.t; acc := acc || a; w0 := w0 || w;
    CONTINUE WHEN a = 0;
    c := nl_enter(c, d.t, w, r, a, d.head);
  END LOOP;
  -- Each job: accepted while its rank among its tenant's is within the
  -- tenant's accepted count; a refused one says the waiting it met.
  WITH b AS (
    SELECT u.n, u.id, u.t, u.cost, s.a, s.w0,
           row_number() OVER (PARTITION BY u.t ORDER BY u.n) <= s.a AS ok
    FROM unnest(p_ids, p_ts, p_costs) WITH ORDINALITY AS u(id, t, cost, n)
    JOIN unnest(ts, acc, w0) AS s(t, a, w0) ON s.t = u.t
  ), ins AS (
    INSERT INTO job (id, tenant, cost, state, enqueued)
    SELECT b.id, b.t, CASE WHEN b.ok THEN coalesce(b.cost, 1) ELSE 1 END,
           CASE WHEN b.ok THEN 'q' ELSE 'x' END, stamp FROM b
  )
  SELECT array_agg(b.ok ORDER BY b.n), array_agg(CASE WHEN b.ok THEN 0 ELSE b.w0 + b.a END ORDER BY b.n)
    INTO oks, xs FROM b;
  c.newest := p_ids[cardinality(p_ids)];
END $$;

-- Hand the next job by the discipline to the longest idle worker, started
-- at `stamp`, when one may start that no wake on its way covers: whether
-- one was handed.
CREATE FUNCTION nl_give(INOUT c cfg, stamp bigint, OUT gave boolean) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  w int; s record;
BEGIN
  gave := false;
  IF c.queue = 'halt' OR c.idle = 0 OR NOT nl_wake_another(c) THEN RETURN; END IF;
  -- The idle count includes the worker handed to, as a take's does.
  s := nl_next(c, c.idle, stamp);
  IF s.job IS NULL THEN RETURN; END IF;
  c := s.c;
  DELETE FROM idle WHERE worker = (SELECT worker FROM idle ORDER BY since LIMIT 1)
    RETURNING worker INTO w;
  c.idle := c.idle - 1;
  INSERT INTO woken (worker, handed) VALUES (w, true);
  INSERT INTO handed VALUES (nextval('tick'), s.job, s.tenant, s.lease);
  PERFORM pg_notify(c.channel || w, 'wake');
  gave := true;
END $$;

-- A job handed out and not picked up: the first handed (`first`; of
-- tenant `p_of`, NULL: of any), started at `stamp` by the worker picking it
-- up, its lease (of `p_lease` µs, NULL: none) renewed from then, or the
-- last (stamp NULL: to go back to its queue). One whose lease ran out
-- before its pick-up (a worker stopped or too slow to hear) went back to
-- its queue and is passed over. Nulls when none is left.
CREATE FUNCTION nl_pick_up(stamp bigint, first boolean, p_lease bigint, p_of int,
                           OUT job bigint, OUT tenant int, OUT lease bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE h handed;
BEGIN
  LOOP
    DELETE FROM handed d WHERE d.seq = CASE
      WHEN first THEN (SELECT min(x.seq) FROM handed x WHERE p_of IS NULL OR x.tenant = p_of)
      ELSE (SELECT max(seq) FROM handed) END
      RETURNING * INTO h;
    IF NOT FOUND THEN RETURN; END IF;
    UPDATE job j SET started = coalesce(stamp, j.started), until = stamp + p_lease
      WHERE j.id = h.job AND j.state = 'r' AND j.lid IS NOT DISTINCT FROM h.lid;
    IF FOUND THEN
      job := h.job; tenant := h.tenant; lease := h.lid;
      RETURN;
    END IF;
  END LOOP;
END $$;

-- Whether no hand-off can follow the push of jobs of tenants `ts` (the
-- rest of a burst): no worker idle, or the queue halted, or (with a cap
-- and no lending now) no job uncovered by a wake and none of these tenants
-- below its cap by what it has waiting (their pushes leave the runnable
-- count as it is).
CREATE FUNCTION nl_settled(c cfg, ts int[]) RETURNS boolean LANGUAGE sql AS $$
  SELECT c.idle = 0 OR c.queue = 'halt' OR (
    c.cap <> nl_no_cap() AND NOT (c.reserve >= 0 AND c.idle > c.reserve)
    AND NOT nl_wake_another(c)
    AND NOT EXISTS (
      SELECT 1 FROM (SELECT DISTINCT u FROM unnest(ts) u) d LEFT JOIN tenant tn ON tn.t = d.u
      WHERE coalesce(tn.waiting, 0) < c.cap - coalesce(tn.running, 0)))
$$;

-- submit_many(jobs, tenants, costs): the jobs due at one instant, in one
-- transaction: for each, in order, (true, 1 if an idle worker was handed a
-- job at its push, else 0) or (false, waiting: refused by the queue
-- limit). A call that hands jobs out stops after the last job a hand-off
-- could follow and returns the rows of the jobs it took, fewer than given:
-- its commit starts those jobs while the caller sends the rest again (a
-- burst: two calls). Jobs NULL (or a NULL among them): the next numbers,
-- taken under the lock (for many submitters at once); costs NULL: 1 each.
CREATE FUNCTION noisylab_submit_many(p_jobs bigint[], p_ts int[], p_costs float8[])
RETURNS TABLE (ok boolean, x int) LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  c cfg := nl_lock();
  stamp bigint := nl_now();
  n int := coalesce(cardinality(p_ts), 0);
  ids bigint[] := '{}';
  costs float8[] := coalesce(p_costs, array_fill(1::float8, ARRAY[n]));
  oks boolean[] := '{}'; xs int[] := '{}';
  i int := 1; prev bigint := c.newest; one_ok boolean; one_x int; look boolean := true;
  handed boolean := false;
  s record;
BEGIN
  IF cardinality(p_jobs) <> n OR cardinality(costs) <> n THEN
    RAISE EXCEPTION 'noisylab: % jobs, % tenants and % costs: give one of each per job (jobs or costs NULL for all)',
      cardinality(p_jobs), n, cardinality(costs);
  END IF;
  FOR k IN 1 .. n LOOP
    ids[k] := coalesce(p_jobs[k], prev + 1);
    IF ids[k] <= prev THEN
      RAISE EXCEPTION 'noisylab: job % is not newer than the last submitted (%): numbers must grow with submits',
        ids[k], prev;
    END IF;
    prev := ids[k];
  END LOOP;
  c := (nl_reap(c, stamp)).c;
  -- One by one while a hand-off may follow (checked again after a push
  -- that handed nothing), and the last job alone so: set-based statements
  -- cost more than one push.
  WHILE i <= n LOOP
    EXIT WHEN i < n AND (c.idle = 0 OR c.queue = 'halt' OR (look AND nl_settled(c, p_ts[i:n])));
    s := nl_push(c, ids[i], p_ts[i], coalesce(costs[i], 1), stamp);
    c := s.c; one_ok := s.ok; one_x := s.waiting;
    look := true;
    IF one_ok THEN
      LOOP
        s := nl_give(c, stamp);
        c := s.c;
        EXIT WHEN NOT s.gave;
        one_x := 1;
      END LOOP;
      IF one_x = 1 THEN
        UPDATE job SET woke = true WHERE id = ids[i];
        look := false;
        handed := true;
      END IF;
    END IF;
    oks := oks || one_ok; xs := xs || one_x;
    i := i + 1;
  END LOOP;
  -- The rest set-based, unless jobs were handed out: then they start
  -- first (this call's commit sends their wakes) and the caller sends the
  -- rest again.
  IF i <= n AND NOT handed THEN
    s := nl_push_rest(c, ids[i:n], p_ts[i:n], costs[i:n], stamp);
    c := s.c; oks := oks || s.oks; xs := xs || s.xs;
  END IF;
  PERFORM nl_save(c);
  RETURN QUERY SELECT * FROM unnest(oks, xs);
END $$;

-- submit(job, tenant, cost): submit_many of one job: (true, 1 if an idle
-- worker was handed a job at its push, else 0) or (false, waiting).
CREATE FUNCTION noisylab_submit(p_job bigint, p_t int, p_cost float8, OUT ok boolean, OUT x int)
LANGUAGE sql AS $$ SELECT * FROM noisylab_submit_many(ARRAY[p_job], ARRAY[p_t], ARRAY[p_cost]) $$;

-- The scheduler alone, for the equivalence tests: push(job, tenant, cost)
-- as submit without the hand-off.
CREATE FUNCTION noisylab_push(p_job bigint, p_t int, p_cost float8, OUT ok boolean, OUT waiting int)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE s record := nl_push(nl_lock(), p_job, p_t, p_cost, nl_now());
BEGIN
  PERFORM nl_save(s.c);
  ok := s.ok; waiting := s.waiting;
END $$;
