-- ===========================================================================
-- SCHEDULES: CRON IN THE DATABASE
-- ===========================================================================

-- A schedule records a run of its type and payload at every tick of a cron
-- expression, in a time zone. Firing happens here, in
-- workflow.fire_due_schedules: whoever calls it (the manager's leader, a
-- second manager during a hand-over, a cron job of the DBA's), each tick of
-- each schedule makes at most one run, and a tick nobody fired stays due
-- until somebody does.
--
-- Exactly once, twice over:
--   * fire_due_schedules locks the due schedules FOR UPDATE SKIP LOCKED and
--     moves next_tick_at past the tick in the same transaction that records
--     the run; a second caller skips a locked schedule, and one that read
--     the old row re-reads it after the first commits and finds it no
--     longer due. A caller that dies before committing leaves nothing: the
--     tick is still due for the next one.
--   * the run's idempotency key names the schedule and the tick, so even a
--     tick fired twice (schedules restored from a backup; a mirrored
--     schedule deleted and recreated under its name) records one run.
--
-- Idempotency keys of the runs a schedule records:
--   schedule:<schedule id>:<tick in UTC, YYYY-MM-DDTHH:MI:SSZ>
--       a schedule made with SQL (source_namespace null), e.g.
--       schedule:5b1d...:2024-03-10T07:00:00Z
--   k8s:<namespace>:schedule/<name>/<tick in unix seconds>
--       a schedule mirrored from the WorkflowSchedule <namespace>/<name>,
--       e.g. k8s:shop:schedule/nightly/1710054000: the key the operator
--       gives a WorkflowRun with spec.idempotencyKey schedule/<name>/<unix>,
--       which therefore adopts the run. Such a run carries source_namespace
--       and source_uid (the WorkflowSchedule's UID, as workflow_run's
--       reserved-key rule asks) and no source_name: no WorkflowRun of that
--       name exists when it is recorded.
-- A schedule's runs are found by these key prefixes alone (workflow_run has
-- no column naming the schedule), through idx_workflow_run_schedule_key,
-- the one object of this section on workflow_run. A run another writer
-- recorded under such a key counts as the schedule's.
--
-- TIME ZONES AND DAYLIGHT SAVING: a cron expression names wall-clock times
-- of the schedule's time zone. A tick that does not exist locally (the
-- hour skipped when clocks spring forward) fires once, at the instant the
-- gap ends (a daily 02:30 in America/New_York fires at 03:00 EDT on that
-- day; ticks 02:00 to 02:59 all land on that instant and fire once, with
-- 03:00). A tick that occurs twice locally (the hour repeated when clocks
-- fall back) fires once, at its first occurrence: the repeated hour has no
-- ticks of its own (an hourly job fires at 00:00, 01:00 daylight time and
-- 02:00 standard time; nothing at 01:00 standard time).
--
-- MISSED TICKS follow Kubernetes CronJob: when several ticks are due at
-- once (nobody called for a while, or a Forbid schedule waited), only the
-- most recent may start; the older ones are reported 'missed'. With
-- starting_deadline_seconds set, the most recent tick is missed too when it
-- is more than that many seconds old. Unlike CronJob, a schedule resumed
-- (suspend set back to false) or given a new cron or zone starts counting
-- from the moment of the change: ticks that passed while it was suspended
-- are not started on resume.
--
-- LOCK ORDER: a schedule row (put_schedule, delete_schedule,
-- fire_due_schedules, which skips locked ones), then runs: the unfinished
-- runs a Replace schedule cancels (cancel_run: the run, then its children),
-- then the run it records (by its key).
--
-- PRIVILEGE (grants belong in roles.sql; none is made here):
--   the manager (the schema owner)   fire_due_schedules, put_schedule,
--                                    delete_schedule, list_schedules,
--                                    cron_next, cron_problem
--   workflow_producer                put_schedule, delete_schedule (their
--                                    own SQL schedules: the functions refuse
--                                    a schedule with a source_namespace to
--                                    anyone but the owner, and a SQL schedule
--                                    to a database user other than the one
--                                    that created it), list_schedules,
--                                    cron_next, cron_problem
--   workflow_reader                  list_schedules, cron_next, cron_problem
--   no one                           cron_fields, cron_field, cron_instant,
--                                    cron_tick, time_zone_problem,
--                                    schedule_key, schedule_key_range,
--                                    schedule_caller_is_owner,
--                                    schedule_payload_problem,
--                                    on_schedule_written


-- ---------------------------------------------------------------------------
-- Cron expressions
-- ---------------------------------------------------------------------------

-- A parsed cron expression (cron_fields): the sorted values each field
-- allows (weekdays 0-6 from Sunday), whether each day field is
-- unrestricted, and what is wrong (null when nothing is). Created once;
-- a changed layout is a migration's work.
do $$
begin
    if not exists (select 1 from pg_catalog.pg_type t join pg_catalog.pg_namespace n on n.oid = t.typnamespace
                   where n.nspname = 'workflow' and t.typname = 'cron_spec') then
        create type workflow.cron_spec as (
            minutes integer[], hours integer[], days integer[], months integer[], weekdays integer[],
            days_star boolean, weekdays_star boolean, problem text);
    end if;
end
$$;

-- cron_field parses one field of a cron expression into the sorted values
-- it allows, between p_min and p_max: a comma-separated list of items, each
-- *, ? (the day fields: p_question), a value, a range a-b, or either
-- followed by /step (a value with a step, a/n, means a to the field's
-- maximum, as in Kubernetes CronJob). p_names, when given, name p_min,
-- p_min+1, ... (months JAN..DEC, weekdays SUN..SAT), in any case. star says
-- whether the field is unrestricted in CronJob's sense (an item * or ?
-- without a step above 1: */2 restricts), which decides how the two day
-- fields combine. problem names the field and what is wrong, or is null.
-- Numbers are read only up to 9 digits (a longer one is out of range,
-- never an overflow), steps only up to the field's count of values.
-- The forms * and a single number take a short path. Pure; no locks.
create or replace function workflow.cron_field(
    p_text text, p_what text, p_min integer, p_max integer, p_names text[], p_question boolean,
    out vals integer[], out star boolean, out problem text
)
language plpgsql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
    v_item text;
    v_range text;
    v_parts text[];
    v_stepped boolean;
    v_step integer;
    v_bounds integer[];
    v_txt text;
    v_set boolean[];
    v_lo integer;
    v_hi integer;
    v_not text;
begin
    star := false;
    if p_text = '*' or (p_text = '?' and p_question) then
        vals := array_positions(array_fill(true, array[p_max - p_min + 1], array[p_min]), true);
        star := true;
        return;
    end if;
    if p_text ~ '^[0-9]{1,2}$' and p_text::integer between p_min and p_max then
        vals := array[p_text::integer];
        return;
    end if;
    v_set := array_fill(false, array[p_max - p_min + 1], array[p_min]);
    v_not := case when p_names is null then 'is not a number'
                  else format('is neither a number nor a name (%s-%s)', p_names[1], p_names[cardinality(p_names)]) end;
    foreach v_item in array string_to_array(p_text, ',') loop
        if v_item = '' then
            problem := format('%s field %s has an empty item', p_what, left(p_text, 40));
            return;
        end if;
        v_parts := string_to_array(v_item, '/');
        if cardinality(v_parts) > 2 then
            problem := format('%s field item %s has more than one /', p_what, left(v_item, 40));
            return;
        end if;
        v_range := v_parts[1];
        v_stepped := cardinality(v_parts) = 2;
        v_step := 1;
        if v_stepped then
            if v_parts[2] !~ '^[0-9]+$' then
                problem := case when v_parts[2] = '' then format('%s field item %s has no step after /', p_what, left(v_item, 40))
                                else format('%s field step %s is not a number', p_what, left(v_parts[2], 40)) end;
                return;
            end if;
            if char_length(v_parts[2]) > 9 or v_parts[2]::integer not between 1 and p_max - p_min + 1 then
                problem := format('%s field step %s is out of range 1-%s', p_what, left(v_parts[2], 40), p_max - p_min + 1);
                return;
            end if;
            v_step := v_parts[2]::integer;
        end if;
        if v_range = '*' or (v_range = '?' and p_question) then
            v_lo := p_min;
            v_hi := p_max;
            star := star or v_step = 1;
        else
            -- A value or a range: each end a number or a name.
            v_parts := string_to_array(v_range, '-');
            if v_range = '' or cardinality(v_parts) > 2 or '' = any (v_parts) then
                problem := format('%s field item %s is not a value, a range a-b, * or a step x/n', p_what, left(v_item, 40));
                return;
            end if;
            v_bounds := '{}';
            foreach v_txt in array v_parts loop
                if v_txt ~ '^[0-9]+$' then
                    if char_length(v_txt) > 9 or v_txt::integer not between p_min and p_max then
                        problem := format('%s field %s is out of range %s-%s', p_what, left(v_txt, 40), p_min, p_max);
                        return;
                    end if;
                    v_bounds := v_bounds || v_txt::integer;
                elsif p_names is not null and upper(v_txt) = any (p_names) then
                    v_bounds := v_bounds || (p_min + array_position(p_names, upper(v_txt)) - 1);
                else
                    problem := format('%s field value %s %s', p_what, left(v_txt, 40), v_not);
                    return;
                end if;
            end loop;
            v_lo := v_bounds[1];
            v_hi := case when cardinality(v_bounds) = 2 then v_bounds[2]
                         when v_stepped then p_max   -- a/n: a to the maximum
                         else v_bounds[1] end;
            if v_lo > v_hi then
                problem := format('%s field range %s runs backwards (%s is after %s)', p_what, v_range, v_parts[1], v_parts[2]);
                return;
            end if;
        end if;
        for i in 0 .. (v_hi - v_lo) / v_step loop
            v_set[v_lo + i * v_step] := true;
        end loop;
    end loop;
    vals := array_positions(v_set, true);
end
$$;

-- cron_fields parses a cron expression: five fields (minute, hour,
-- day-of-month, month, day-of-week) separated by blanks, or a macro
-- (@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly).
-- Weekday 7 is Sunday, as 0 is. problem names what is wrong, including an
-- expression at most 1024 characters long that never fires (a day of the
-- month none of its months has, like 0 0 30 2 *); the value fields are
-- null then. Pure: no time zone, no clock, no locks.
create or replace function workflow.cron_fields(p_expr text) returns workflow.cron_spec
language plpgsql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
    c_months constant text[] := '{JAN,FEB,MAR,APR,MAY,JUN,JUL,AUG,SEP,OCT,NOV,DEC}';
    c_weekdays constant text[] := '{SUN,MON,TUE,WED,THU,FRI,SAT}';
    c_max_days constant integer[] := '{31,29,31,30,31,30,31,31,30,31,30,31}';
    v_expr text := btrim(p_expr, E' \t\r\n');
    v_fields text[];
    v_month integer;
    r workflow.cron_spec;
    f record;
begin
    if p_expr is null or v_expr = '' then
        r.problem := 'cron expression is empty';
        return r;
    end if;
    if char_length(p_expr) > 1024 then
        r.problem := format('cron expression is %s characters; at most 1024 are allowed', char_length(p_expr));
        return r;
    end if;
    if left(v_expr, 1) = '@' then
        v_expr := case lower(v_expr)
                      when '@yearly' then '0 0 1 1 *' when '@annually' then '0 0 1 1 *'
                      when '@monthly' then '0 0 1 * *' when '@weekly' then '0 0 * * 0'
                      when '@daily' then '0 0 * * *' when '@midnight' then '0 0 * * *'
                      when '@hourly' then '0 * * * *' end;
        if v_expr is null then
            r.problem := format('unknown macro %s; the macros are @yearly, @annually, @monthly, @weekly, @daily, @midnight and @hourly',
                                left(btrim(p_expr, E' \t\r\n'), 40));
            return r;
        end if;
    end if;
    if upper(v_expr) ~ '^(CRON_)?TZ=' then
        r.problem := 'a time zone is not part of the cron expression (CRON_TZ= or TZ=); give it as the schedule''s time zone';
        return r;
    end if;
    v_fields := regexp_split_to_array(v_expr, '[ \t\r\n]+');
    if cardinality(v_fields) <> 5 then
        r.problem := format('a cron expression has 5 fields (minute hour day-of-month month day-of-week), got %s',
                            cardinality(v_fields));
        return r;
    end if;

    f := workflow.cron_field(v_fields[1], 'minute', 0, 59, null, false);
    r.minutes := f.vals;
    r.problem := f.problem;
    if r.problem is null then
        f := workflow.cron_field(v_fields[2], 'hour', 0, 23, null, false);
        r.hours := f.vals;
        r.problem := f.problem;
    end if;
    if r.problem is null then
        f := workflow.cron_field(v_fields[3], 'day-of-month', 1, 31, null, true);
        r.days := f.vals;
        r.days_star := f.star;
        r.problem := f.problem;
    end if;
    if r.problem is null then
        f := workflow.cron_field(v_fields[4], 'month', 1, 12, c_months, false);
        r.months := f.vals;
        r.problem := f.problem;
    end if;
    if r.problem is null then
        -- 0-7, 7 being Sunday again; names SUN..SAT are 0..6.
        f := workflow.cron_field(v_fields[5], 'day-of-week', 0, 7, c_weekdays, true);
        r.weekdays := f.vals;
        if 7 = any (r.weekdays) then
            r.weekdays := array_remove(r.weekdays, 7);
            if r.weekdays[1] is distinct from 0 then
                r.weekdays := 0 || r.weekdays;
            end if;
        end if;
        r.weekdays_star := f.star;
        r.problem := f.problem;
    end if;
    if r.problem is null and not r.days_star and r.weekdays_star then
        -- The days of the month alone decide (the weekday field is *): some
        -- month of the month field must have the first of them.
        r.problem := format('the expression never fires: no month of the month field (%s) has day %s (day-of-month field)',
                            array_to_string(r.months, ','), r.days[1]);
        foreach v_month in array r.months loop
            if r.days[1] <= c_max_days[v_month] then
                r.problem := null;
                exit;
            end if;
        end loop;
    end if;
    if r.problem is not null then
        return row(null, null, null, null, null, null, null, r.problem)::workflow.cron_spec;
    end if;
    return r;
end
$$;

-- cron_instant is the instant of a local wall-clock time in a zone, as a
-- schedule fires it: a time that exists once is that instant; a time that
-- exists twice (clocks fell back) is its first occurrence; a time that does
-- not exist (clocks sprang forward over it) is the instant the gap ends.
-- It compares the zone's UTC offsets a day before and after (no zone
-- changes its offset twice within two days) and, in a gap, finds the
-- transition to the second by bisection (at most 17 steps for an 18-hour
-- gap). Pure; no locks.
create or replace function workflow.cron_instant(p_local timestamp, p_zone text) returns timestamptz
language plpgsql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
    v_u timestamptz := p_local at time zone 'UTC';
    v_before interval := ((v_u - interval '1 day') at time zone p_zone) - ((v_u - interval '1 day') at time zone 'UTC');
    v_after interval := ((v_u + interval '1 day') at time zone p_zone) - ((v_u + interval '1 day') at time zone 'UTC');
    v_early timestamptz := v_u - v_before;   -- p_local read with the offset before
    v_late timestamptz := v_u - v_after;     -- and with the offset after
    v_early_ok boolean := (v_early at time zone p_zone) = p_local;
    v_late_ok boolean := (v_late at time zone p_zone) = p_local;
    v_lo bigint;
    v_hi bigint;
    v_mid bigint;
begin
    if v_early_ok and v_late_ok then
        return least(v_early, v_late);   -- one instant, or the first of two
    elsif v_early_ok then
        return v_early;
    elsif v_late_ok then
        return v_late;
    end if;
    -- A gap: the offset grew from v_before to v_after at an instant in
    -- (v_late, v_early]; the first second that has the new offset.
    v_lo := floor(extract(epoch from least(v_early, v_late)))::bigint;
    v_hi := ceil(extract(epoch from greatest(v_early, v_late)))::bigint;
    while v_hi - v_lo > 1 loop
        v_mid := (v_lo + v_hi) / 2;
        if (to_timestamp(v_mid) at time zone p_zone) - (to_timestamp(v_mid) at time zone 'UTC') = v_after then
            v_hi := v_mid;
        else
            v_lo := v_mid;
        end if;
    end loop;
    return to_timestamp(v_hi);
end
$$;

-- cron_tick is the first tick of a parsed cron expression in a time zone
-- strictly after p_after (cron_instant places local ticks in time). The two
-- day fields combine as in Kubernetes CronJob (robfig/cron) and Vixie cron:
-- when both are restricted a day matches either; when one is unrestricted
-- only the other decides. It walks months (skipping those the month field
-- excludes), then the days of a month that may fire (only those of the
-- day-of-month field when the weekday field is unrestricted), then the
-- hours and minutes of a matching day: a few steps, never a
-- minute-by-minute scan.
-- The walk is bounded by 10 years of months (121): every expression
-- cron_fields accepts fires within 8 years (a 29 February: none from 2096
-- to 2104), and past the bound it raises. Raises for an unknown zone.
-- No locks.
create or replace function workflow.cron_tick(p_spec workflow.cron_spec, p_zone text, p_after timestamptz)
returns timestamptz
language plpgsql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
    v_start timestamp;       -- the first local minute that may be the tick
    v_start_day date;
    v_start_hour integer;
    v_start_minute integer;
    v_either boolean := not (p_spec.days_star or p_spec.weekdays_star);
    c_days constant integer[] := array_positions(array_fill(true, array[31], array[1]), true);
    v_month date;
    v_first integer;
    v_last integer;
    v_d integer;
    v_day date;
    v_dom boolean;
    v_dow boolean;
    v_h integer;
    v_m integer;
    v_tick timestamptz;
begin
    -- Every local tick before the local time of p_after fires at or before
    -- p_after (ticks' instants grow with their local times), so the search
    -- starts at its minute.
    v_start := date_trunc('minute', p_after at time zone p_zone);
    v_start_day := v_start::date;
    v_start_hour := extract(hour from v_start)::integer;
    v_start_minute := extract(minute from v_start)::integer;
    v_month := date_trunc('month', v_start)::date;
    for i in 0 .. 120 loop
        if extract(month from v_month)::integer = any (p_spec.months) then
            v_first := extract(day from greatest(v_month, v_start_day))::integer;
            v_last := extract(day from (v_month + interval '1 month')::date - 1)::integer;
            -- The weekday field unrestricted: the days of the month field
            -- are the candidates; otherwise every day, checked.
            foreach v_d in array case when p_spec.weekdays_star then p_spec.days else c_days end loop
                continue when v_d < v_first;
                exit when v_d > v_last;
                v_day := v_month + (v_d - 1);
                if not p_spec.weekdays_star then
                    v_dom := v_d = any (p_spec.days);
                    v_dow := extract(dow from v_day)::integer = any (p_spec.weekdays);
                    continue when not ((v_dom and v_dow) or (v_either and (v_dom or v_dow)));
                end if;
                foreach v_h in array p_spec.hours loop
                    continue when v_day = v_start_day and v_h < v_start_hour;
                    foreach v_m in array p_spec.minutes loop
                        continue when v_day = v_start_day and v_h = v_start_hour and v_m < v_start_minute;
                        v_tick := workflow.cron_instant(v_day + make_interval(hours => v_h, mins => v_m), p_zone);
                        if v_tick > p_after then
                            return v_tick;
                        end if;
                    end loop;
                end loop;
            end loop;
        end if;
        v_month := (v_month + interval '1 month')::date;
    end loop;
    raise exception 'the cron expression has no tick within 10 years after %', p_after using errcode = '22023';
end
$$;

-- cron_next is the first tick of a cron expression (cron_fields) in a time
-- zone strictly after p_after: local wall-clock ticks, daylight saving as
-- the section's header says (cron_instant), the day fields combined as in
-- Kubernetes CronJob, found by walking months, days, hours and minutes
-- (cron_tick, at most 10 years). Raises for an invalid expression, an
-- unknown zone or an infinite p_after (22023).
-- Measured (TestCronNextCost, Postgres 15 on a 2-core machine): 10,000
-- calls of 0 0 29 2 1 in Europe/Berlin take about 0.53 s, 53 us a call,
-- most of it parsing the expression; 0 0 29 2 * (up to four years to the
-- next tick) 0.62 s; */5 * * * * 0.58 s. fire_due_schedules parses once per
-- schedule and calls cron_tick.
-- No locks.
create or replace function workflow.cron_next(p_expr text, p_zone text, p_after timestamptz) returns timestamptz
language plpgsql stable parallel safe security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    v_spec workflow.cron_spec := workflow.cron_fields(p_expr);
begin
    if v_spec.problem is not null then
        raise exception 'invalid cron expression %: %', left(p_expr, 100), v_spec.problem using errcode = '22023';
    end if;
    if p_zone is null then
        raise exception 'cron_next: time zone is missing' using errcode = '22023';
    end if;
    if p_after is null or not isfinite(p_after) then
        raise exception 'cron_next: the time to start from must be a finite timestamp, got %', p_after
            using errcode = '22023';
    end if;
    return workflow.cron_tick(v_spec, p_zone, p_after);
end
$$;

-- time_zone_problem says what is wrong with a time zone name, or null. A
-- zone is a name of pg_timezone_names (America/New_York, UTC, ...),
-- exactly as listed: no abbreviation, offset or POSIX rule. Reading
-- pg_timezone_names takes tens of milliseconds, so with p_listed false
-- only the name's form and that Postgres can load it are checked (cheap;
-- an abbreviation or a POSIX rule passes). No locks.
create or replace function workflow.time_zone_problem(p_zone text, p_listed boolean) returns text
language plpgsql stable parallel safe
set search_path = pg_catalog, pg_temp
as $_$
declare
    v_known boolean;
begin
    if p_zone is null or p_zone = '' then
        return 'time zone is missing';
    end if;
    v_known := char_length(p_zone) <= 64 and p_zone ~ '^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$';
    if v_known then
        begin
            perform pg_catalog.now() at time zone p_zone;
        exception when invalid_parameter_value then
            v_known := false;
        end;
    end if;
    if v_known and p_listed then
        v_known := exists (select 1 from pg_catalog.pg_timezone_names z where z.name = p_zone);
    end if;
    if not v_known then
        return format('unknown time zone %s (time zones are names such as UTC or Europe/Berlin, as in pg_timezone_names)',
                      left(p_zone, 80));
    end if;
    return null;
end
$_$;

-- cron_problem says what is wrong with a cron expression and a time zone,
-- in words naming the bad field, or null when a schedule may use them
-- (cron_fields, time_zone_problem with the zone looked up in
-- pg_timezone_names: tens of milliseconds, so it is called when a
-- schedule's expression or zone is written, not when it fires). No locks.
create or replace function workflow.cron_problem(p_expr text, p_zone text) returns text
language sql stable parallel safe security definer
set search_path = pg_catalog, pg_temp
return coalesce((workflow.cron_fields(p_expr)).problem, workflow.time_zone_problem(p_zone, true));


-- ---------------------------------------------------------------------------
-- The table
-- ---------------------------------------------------------------------------

-- One row per schedule. Its identity is (source_namespace, name): a
-- schedule mirrored from a Kubernetes WorkflowSchedule has the object's
-- namespace, name and UID; one made with SQL has no namespace (its name is
-- unique among those). The run it records: type, payload, priority,
-- max_attempts, deadline (the run's deadline_at is the firing time plus
-- this). next_tick_at is the next tick to fire (stale while suspended:
-- resuming recomputes it); last_tick_at the last tick dealt with, and
-- last_outcome what became of it; last_fired_run the run of the last tick
-- that recorded one. Written by the functions below; the checks and the
-- trigger hold for plain SQL too.
create table if not exists workflow.workflow_schedule (
    id uuid not null default gen_random_uuid(),
    name text not null,
    source_namespace text,                          -- a mirrored WorkflowSchedule
    source_uid text,
    cron text not null,
    time_zone text not null default 'UTC',
    type text not null,
    payload jsonb not null default '{}',
    priority integer not null default 100,
    max_attempts integer not null default 3,
    deadline interval,                              -- null: none
    concurrency_policy text not null default 'Allow',
    starting_deadline_seconds integer,              -- null: no deadline
    suspend boolean not null default false,
    next_tick_at timestamptz not null,
    last_tick_at timestamptz,
    last_outcome text,
    last_error text,
    last_fired_run uuid,
    created_by text not null default session_user,  -- the database user that made it
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    constraint workflow_schedule_pkey primary key (id),
    constraint workflow_schedule_name_format
        check (char_length(name) <= 253 and name ~ '^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$'),
    constraint workflow_schedule_source_namespace_format
        check (char_length(source_namespace) <= 63 and source_namespace ~ '^[a-z0-9]([a-z0-9-]*[a-z0-9])?$'),
    constraint workflow_schedule_source_uid_set
        check ((source_namespace is null) = (source_uid is null) and char_length(source_uid) between 1 and 128),
    constraint workflow_schedule_cron_valid
        check (char_length(cron) <= 1024 and (workflow.cron_fields(cron)).problem is null),
    constraint workflow_schedule_time_zone_format
        check (char_length(time_zone) <= 64 and time_zone ~ '^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$'),
    constraint workflow_schedule_type_format
        check (char_length(type) <= 253 and type ~ '^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$'),
    constraint workflow_schedule_payload_object check (jsonb_typeof(payload) = 'object'),
    constraint workflow_schedule_priority_range check (priority >= 0 and priority <= 1000000),
    constraint workflow_schedule_max_attempts_range check (max_attempts >= 1 and max_attempts <= 1000),
    constraint workflow_schedule_deadline_range check (deadline > '0' and deadline <= '100 years'),
    constraint workflow_schedule_concurrency_policy_valid check (concurrency_policy in ('Allow', 'Forbid', 'Replace')),
    constraint workflow_schedule_starting_deadline_range check (starting_deadline_seconds >= 0),
    constraint workflow_schedule_last_outcome_valid
        check (last_outcome in ('fired', 'missed', 'skipped_forbid', 'replaced', 'failed')),
    constraint workflow_schedule_last_error_length check (char_length(last_error) <= 8192),
    constraint workflow_schedule_created_by_length check (char_length(created_by) <= 128),
    constraint workflow_schedule_times_finite check (isfinite(next_tick_at))
);
comment on table workflow.workflow_schedule is
    'Cron schedules: each tick of cron in time_zone records one run of type and payload (workflow.fire_due_schedules).';
comment on column workflow.workflow_schedule.next_tick_at is
    'The next tick to fire; stale while suspended (resuming, or a new cron or time zone, recomputes it from workflow.now()).';
create unique index if not exists idx_workflow_schedule_identity
    on workflow.workflow_schedule ((coalesce(source_namespace, '')), name);
create index if not exists idx_workflow_schedule_due on workflow.workflow_schedule (next_tick_at) where not suspend;

-- The unfinished runs of a schedule, found by the prefix of their
-- idempotency keys. In the "C" collation, whatever the database's: a range
-- on the key in a linguistic collation would not hold every key of a
-- prefix. Partial: only unfinished runs with a schedule's key, so other
-- runs cost it one predicate test per write.
create index if not exists idx_workflow_run_schedule_key on workflow.workflow_run (idempotency_key collate "C")
    where status in ('pending', 'leased')
      and (starts_with(idempotency_key, 'schedule:')
           or (starts_with(idempotency_key, 'k8s:') and strpos(idempotency_key, ':schedule/') > 0));

-- What is wrong with a schedule's payload (not an object, over
-- workflow_settings.max_payload_bytes, nested too deep), or null: the
-- limits of a run's payload, told when the schedule is written rather than
-- at every tick.
create or replace function workflow.schedule_payload_problem(p_payload jsonb) returns text
language sql stable parallel safe
set search_path = pg_catalog, pg_temp
return case
    when p_payload is null or jsonb_typeof(p_payload) <> 'object' then 'payload must be a JSON object'
    when octet_length(p_payload::text) > (select st.max_payload_bytes from workflow.workflow_settings st)
        then format('payload is %s bytes; the limit is %s (workflow_settings.max_payload_bytes)',
                    octet_length(p_payload::text), (select st.max_payload_bytes from workflow.workflow_settings st))
    when workflow.json_too_deep(p_payload)
        then 'payload nests deeper than 64 levels (objects and arrays), the most a stored value may' end;

-- Every write of a schedule's expression, zone or payload, by the
-- functions below or plain SQL: what the table's checks cannot say (the
-- zone is in pg_timezone_names, the payload within the owner's limits) is
-- refused here, with the reason (cron_problem, schedule_payload_problem).
-- Only what changed is checked; updates that leave those three columns as
-- they were (a firing, a put that changes other fields) skip it.
create or replace function workflow.on_schedule_written() returns trigger
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    v_problem text;
begin
    if tg_op = 'INSERT' or new.cron is distinct from old.cron or new.time_zone is distinct from old.time_zone then
        v_problem := workflow.cron_problem(new.cron, new.time_zone);
    end if;
    if v_problem is null and (tg_op = 'INSERT' or new.payload is distinct from old.payload) then
        v_problem := workflow.schedule_payload_problem(new.payload);
    end if;
    if v_problem is not null then
        raise exception 'schedule %: %', new.name, v_problem using errcode = '22023';
    end if;
    return new;
end
$$;
create or replace trigger workflow_schedule_inserted
    before insert on workflow.workflow_schedule
    for each row execute function workflow.on_schedule_written();
create or replace trigger workflow_schedule_changed
    before update of cron, time_zone, payload on workflow.workflow_schedule
    for each row when (new.cron is distinct from old.cron or new.time_zone is distinct from old.time_zone
                       or new.payload is distinct from old.payload)
    execute function workflow.on_schedule_written();


-- ---------------------------------------------------------------------------
-- Keys and callers
-- ---------------------------------------------------------------------------

-- schedule_key is the idempotency key of the run a schedule records for a
-- tick (see the section's header). Pure.
create or replace function workflow.schedule_key(p_id uuid, p_namespace text, p_name text, p_tick timestamptz)
returns text
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
return case when p_namespace is null
            then 'schedule:' || p_id::text || ':' || to_char(p_tick at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
            else 'k8s:' || p_namespace || ':schedule/' || p_name || '/' || floor(extract(epoch from p_tick))::bigint::text
       end;

-- schedule_key_range is the range [lo, hi) of the keys of one schedule's
-- runs in the "C" collation: the prefix every key of the schedule has, and
-- the prefix with its last character (':' or '/') raised by one. Pure.
create or replace function workflow.schedule_key_range(p_id uuid, p_namespace text, p_name text,
                                                        out lo text, out hi text)
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select p, left(p, -1) || chr(ascii(right(p, 1)) + 1)
    from (select case when p_namespace is null then 'schedule:' || p_id::text || ':'
                      else 'k8s:' || p_namespace || ':schedule/' || p_name || '/' end as p) k
$$;

-- Whether the database user of this session may act as the owner of the
-- schedules (the operator, a DBA): only such a user writes a schedule
-- mirrored from Kubernetes, or another user's SQL schedule. session_user,
-- not current_user: the functions asking run as the owner.
create or replace function workflow.schedule_caller_is_owner() returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
return pg_has_role(session_user,
                   (select c.relowner from pg_catalog.pg_class c where c.oid = 'workflow.workflow_schedule'::regclass),
                   'usage');


-- ---------------------------------------------------------------------------
-- Writing schedules
-- ---------------------------------------------------------------------------

-- put_schedule creates the schedule (p_source_namespace, p_name) or
-- updates it, after checking every field (each refusal names the field,
-- errcode 22023; a schedule another may not write, 42501). next_tick_at is
-- the first tick after workflow.now() for a new schedule, and when the
-- cron expression or the time zone changed or the schedule is resumed
-- (suspend from true to false); otherwise it stays. A put that changes
-- nothing writes nothing. Returns the schedule's id and next tick.
-- A schedule with p_source_namespace mirrors a Kubernetes WorkflowSchedule
-- (p_source_uid its UID) and is written by the owner only; a SQL schedule
-- by the database user that created it, or the owner.
-- Fires: workflow_schedule_inserted, workflow_schedule_changed (zone,
-- payload limits).
-- Locks: the schedule row.
create or replace function workflow.put_schedule(
    p_name text,
    p_cron text,
    p_type text,
    p_payload jsonb default '{}',
    p_time_zone text default 'UTC',
    p_priority integer default 100,
    p_max_attempts integer default 3,
    p_deadline interval default null,
    p_concurrency_policy text default 'Allow',
    p_starting_deadline_seconds integer default null,
    p_suspend boolean default false,
    p_source_namespace text default null,
    p_source_uid text default null
) returns table (id uuid, next_tick_at timestamptz)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $_$
#variable_conflict use_column
declare
    v_now timestamptz := workflow.now();
    v_owner boolean := workflow.schedule_caller_is_owner();
    v_label text;
    v_problem text;
    v_old workflow.workflow_schedule;
    v_id uuid;
    v_next timestamptz;
begin
    if p_name is null or char_length(p_name) > 253 or p_name !~ '^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$' then
        raise exception 'schedule name %: a name is lowercase letters, digits, ''.'', ''_'' and ''-'', starting and ending with a letter or digit, at most 253 characters',
            coalesce(quote_literal(left(p_name, 300)), 'null') using errcode = '22023';
    end if;
    if p_source_namespace is not null then
        if char_length(p_source_namespace) > 63 or p_source_namespace !~ '^[a-z0-9]([a-z0-9-]*[a-z0-9])?$' then
            raise exception 'schedule %: source namespace % is not a Kubernetes namespace name', p_name,
                quote_literal(left(p_source_namespace, 100)) using errcode = '22023';
        end if;
        if p_source_uid is null or char_length(p_source_uid) not between 1 and 128 then
            raise exception 'schedule %/%: a schedule mirrored from Kubernetes needs the object''s UID (1 to 128 characters)',
                p_source_namespace, p_name using errcode = '22023';
        end if;
        if not v_owner then
            raise exception 'schedule %/%: a schedule with a source namespace mirrors a Kubernetes WorkflowSchedule, and only the operator (the schema''s owner) writes it',
                p_source_namespace, p_name using errcode = '42501';
        end if;
    elsif p_source_uid is not null then
        raise exception 'schedule %: a source UID is given without a source namespace', p_name using errcode = '22023';
    end if;
    v_label := coalesce(p_source_namespace || '/', '') || p_name;

    -- The zone's form here; that it is in pg_timezone_names, once, by the
    -- trigger the write fires (the same message).
    v_problem := case
        when (workflow.cron_fields(p_cron)).problem is not null
            then (workflow.cron_fields(p_cron)).problem
        when workflow.time_zone_problem(p_time_zone, false) is not null
            then workflow.time_zone_problem(p_time_zone, false)
        when p_type is null or char_length(p_type) > 253 or p_type !~ '^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$'
            then format('type %s: a type is lowercase dot-separated words ending in a version, like billing.invoice.v1 (at most 253 characters)',
                        coalesce(quote_literal(left(p_type, 300)), 'null'))
        when workflow.schedule_payload_problem(p_payload) is not null
            then workflow.schedule_payload_problem(p_payload)
        when p_priority is null or p_priority not between 0 and 1000000
            then format('priority must be between 0 and 1000000, got %s', coalesce(p_priority::text, 'null'))
        when p_max_attempts is null or p_max_attempts not between 1 and 1000
            then format('max attempts must be between 1 and 1000, got %s', coalesce(p_max_attempts::text, 'null'))
        when p_deadline <= '0' or p_deadline > '100 years'
            then format('deadline must be positive and at most 100 years, got %s', p_deadline)
        when p_concurrency_policy is null or p_concurrency_policy not in ('Allow', 'Forbid', 'Replace')
            then format('concurrency policy must be Allow, Forbid or Replace, got %s',
                        coalesce(quote_literal(left(p_concurrency_policy, 100)), 'null'))
        when p_starting_deadline_seconds < 0
            then format('starting deadline seconds must be at least 0, got %s', p_starting_deadline_seconds)
        when p_suspend is null
            then 'suspend must be true or false'
    end;
    if v_problem is not null then
        raise exception 'schedule %: %', v_label, v_problem using errcode = '22023';
    end if;

    loop
        select * into v_old from workflow.workflow_schedule sc
        where coalesce(sc.source_namespace, '') = coalesce(p_source_namespace, '') and sc.name = p_name
        for update;
        if found then
            if v_old.source_namespace is null and v_old.created_by <> session_user and not v_owner then
                raise exception 'schedule %: created by database user %; only that user or the schema''s owner may change it',
                    v_label, v_old.created_by using errcode = '42501';
            end if;
            v_next := case when v_old.cron <> p_cron or v_old.time_zone <> p_time_zone
                                or (v_old.suspend and not p_suspend)
                           then workflow.cron_next(p_cron, p_time_zone, v_now)
                           else v_old.next_tick_at end;
            update workflow.workflow_schedule sc
            set cron = p_cron, time_zone = p_time_zone, type = p_type, payload = p_payload, priority = p_priority,
                max_attempts = p_max_attempts, deadline = p_deadline, concurrency_policy = p_concurrency_policy,
                starting_deadline_seconds = p_starting_deadline_seconds, suspend = p_suspend,
                source_uid = p_source_uid, next_tick_at = v_next, updated_at = now()
            where sc.id = v_old.id
              and (sc.cron, sc.time_zone, sc.type, sc.payload, sc.priority, sc.max_attempts, sc.deadline,
                   sc.concurrency_policy, sc.starting_deadline_seconds, sc.suspend, sc.source_uid, sc.next_tick_at)
                  is distinct from
                  (p_cron, p_time_zone, p_type, p_payload, p_priority, p_max_attempts, p_deadline,
                   p_concurrency_policy, p_starting_deadline_seconds, p_suspend, p_source_uid, v_next);
            return query select v_old.id, v_next;
            return;
        end if;
        insert into workflow.workflow_schedule as sc (
            name, source_namespace, source_uid, cron, time_zone, type, payload, priority, max_attempts, deadline,
            concurrency_policy, starting_deadline_seconds, suspend, next_tick_at)
        values (p_name, p_source_namespace, p_source_uid, p_cron, p_time_zone, p_type, p_payload, p_priority,
                p_max_attempts, p_deadline, p_concurrency_policy, p_starting_deadline_seconds, p_suspend,
                workflow.cron_next(p_cron, p_time_zone, v_now))
        on conflict ((coalesce(source_namespace, '')), name) do nothing
        returning sc.id, sc.next_tick_at into v_id, v_next;
        if v_id is not null then
            return query select v_id, v_next;
            return;
        end if;
        -- Created at this instant by another put (now committed): update it.
    end loop;
end
$_$;

-- delete_schedule deletes the schedule (p_source_namespace, p_name) and
-- reports whether there was one. Its runs stay, finished or not. The same
-- callers as put_schedule may delete (42501 otherwise).
-- Locks: the schedule row.
create or replace function workflow.delete_schedule(p_name text, p_source_namespace text default null)
returns boolean
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    v_owner boolean := workflow.schedule_caller_is_owner();
    v_old workflow.workflow_schedule;
begin
    if p_source_namespace is not null and not v_owner then
        raise exception 'schedule %/%: a schedule with a source namespace mirrors a Kubernetes WorkflowSchedule, and only the operator (the schema''s owner) deletes it',
            left(p_source_namespace, 100), left(p_name, 300) using errcode = '42501';
    end if;
    select * into v_old from workflow.workflow_schedule sc
    where coalesce(sc.source_namespace, '') = coalesce(p_source_namespace, '') and sc.name = p_name
    for update;
    if not found then
        return false;
    end if;
    if v_old.source_namespace is null and v_old.created_by <> session_user and not v_owner then
        raise exception 'schedule %: created by database user %; only that user or the schema''s owner may delete it',
            p_name, v_old.created_by using errcode = '42501';
    end if;
    delete from workflow.workflow_schedule sc where sc.id = v_old.id;
    return true;
end
$$;


-- ---------------------------------------------------------------------------
-- Firing
-- ---------------------------------------------------------------------------

-- fire_due_schedules fires up to p_limit due schedules (not suspended,
-- next_tick_at <= workflow.now()), oldest tick first, and returns one row
-- per tick it dealt with:
--   fired           the tick's run was recorded (run_id; an existing run
--                   that already held the tick's key counts as recorded)
--   replaced        the same, after cancelling the schedule's unfinished
--                   runs (concurrency_policy Replace)
--   skipped_forbid  a run of the schedule is unfinished (Forbid): none
--   missed          not started: an older due tick (only the most recent
--                   may start), or one more than starting_deadline_seconds
--                   old
--   failed          recording the run failed (the error, say a payload
--                   over a since lowered workflow_settings.max_payload_bytes,
--                   is kept in last_error); the tick is not retried
-- then sets last_tick_at, last_outcome, last_error, last_fired_run and
-- next_tick_at (the first tick after the one dealt with).
-- Due ticks are found by walking from next_tick_at with cron_next, at most
-- 100 steps (each older tick reported missed); when more are due, the most
-- recent is found by bisection between the 100th and now (about 25
-- cron_next calls for years of minutes) and the ticks between are not
-- listed. A schedule whose next tick cannot be computed (its zone left the
-- time zone database) is failed and parked at workflow.far_future() until
-- a put changes it.
-- Each schedule is fired in a subtransaction, so one that fails leaves the
-- others fired; errors of concurrency or resources (classes 40, 53, 55P03,
-- 57, 58, XX) are raised instead, and the whole call is retried by its
-- caller with every tick still due. (Past 64 subtransactions that write,
-- other sessions' snapshots cost more while the call runs: p_limit bounds
-- them; keep it near the default.)
-- Runs are recorded by workflow.create_run and cancelled by
-- workflow.cancel_run (workflow.cancelled_by 'schedule <name>'), so every
-- rule, event and trigger of a producer's run and cancel applies.
-- Fires: workflow_run_inserted ('created', payload limits, DAG start),
-- workflow_run_wake, workflow_run_cancelled, workflow_parent_ended,
-- workflow_child_finished, workflow_source_run_changed (cancel_run).
-- Locks: the schedules, skipping locked ones (two callers never fire one
-- schedule at once; a caller that read a schedule another then fired finds
-- it no longer due); per schedule, then, its unfinished runs in id order
-- (Replace), then the new run's key.
create or replace function workflow.fire_due_schedules(p_limit integer default 100)
returns table (schedule_id uuid, tick timestamptz, run_id uuid, outcome text)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    c_walk constant integer := 100;
    v_now timestamptz := workflow.now();
    v_by text := coalesce(current_setting('workflow.cancelled_by', true), '');
    s workflow.workflow_schedule;
    v_tick timestamptz;
    v_next timestamptz;
    v_missed timestamptz[];
    v_lo timestamptz;
    v_hi timestamptz;
    v_mid timestamptz;
    v_range record;
    v_spec workflow.cron_spec;
    v_unfinished uuid[];
    v_cancel uuid;
    v_run uuid;
    v_outcome text;
    v_error text;
    v_state text;
begin
    if p_limit is null or p_limit < 1 or p_limit > 10000 then
        raise exception 'fire_due_schedules: the limit must be between 1 and 10000, got %', p_limit using errcode = '22023';
    end if;
    for s in
        select * from workflow.workflow_schedule sc
        where not sc.suspend and sc.next_tick_at <= v_now
        order by sc.next_tick_at, sc.id
        limit p_limit
        for update skip locked
    loop
        v_tick := s.next_tick_at;
        v_next := null;
        v_missed := '{}';
        v_run := null;
        v_outcome := null;
        v_error := null;
        begin
            v_spec := workflow.cron_fields(s.cron);
            if v_spec.problem is not null then
                raise exception 'invalid cron expression %: %', left(s.cron, 100), v_spec.problem using errcode = '22023';
            end if;
            -- The most recent due tick: walk (v_tick is due, v_next the
            -- tick after it), then bisect if more are due.
            v_next := workflow.cron_tick(v_spec, s.time_zone, v_tick);
            while v_next <= v_now and cardinality(v_missed) < c_walk loop
                v_missed := v_missed || v_tick;
                v_tick := v_next;
                v_next := workflow.cron_tick(v_spec, s.time_zone, v_tick);
            end loop;
            if v_next <= v_now then
                -- cron_tick(v_lo) <= now < cron_tick(v_hi) throughout.
                v_lo := v_tick;
                v_hi := v_now;
                for i in 1 .. 100 loop
                    v_tick := workflow.cron_tick(v_spec, s.time_zone, v_lo);
                    v_next := workflow.cron_tick(v_spec, s.time_zone, v_tick);
                    exit when v_next > v_now;
                    v_mid := v_lo + (v_hi - v_lo) / 2;
                    if workflow.cron_tick(v_spec, s.time_zone, v_mid) <= v_now then
                        v_lo := v_mid;
                    else
                        v_hi := v_mid;
                    end if;
                end loop;
                if v_next <= v_now then
                    raise exception 'schedule %: the most recent due tick was not found', s.name;
                end if;
            end if;

            if s.starting_deadline_seconds is not null
               and v_tick < v_now - make_interval(secs => s.starting_deadline_seconds) then
                v_outcome := 'missed';
            end if;
            if v_outcome is null and s.concurrency_policy <> 'Allow' then
                select * into v_range from workflow.schedule_key_range(s.id, s.source_namespace, s.name);
                select array_agg(r.id order by r.id) into v_unfinished
                from workflow.workflow_run r
                where r.idempotency_key collate "C" >= v_range.lo and r.idempotency_key collate "C" < v_range.hi
                  and r.status in ('pending', 'leased')
                  and (starts_with(r.idempotency_key, 'schedule:')
                       or (starts_with(r.idempotency_key, 'k8s:') and strpos(r.idempotency_key, ':schedule/') > 0));
                if v_unfinished is not null and s.concurrency_policy = 'Forbid' then
                    v_outcome := 'skipped_forbid';
                elsif v_unfinished is not null then
                    perform set_config('workflow.cancelled_by',
                                       'schedule ' || coalesce(s.source_namespace || '/', '') || s.name, true);
                    foreach v_cancel in array v_unfinished loop
                        perform workflow.cancel_run(v_cancel);
                    end loop;
                    perform set_config('workflow.cancelled_by', v_by, true);
                    v_outcome := 'replaced';
                end if;
            end if;
            if v_outcome is null or v_outcome = 'replaced' then
                select c.id into v_run
                from workflow.create_run(
                    p_type => s.type, p_payload => s.payload, p_priority => s.priority,
                    p_idempotency_key => workflow.schedule_key(s.id, s.source_namespace, s.name, v_tick),
                    p_max_attempts => s.max_attempts, p_deadline_at => v_now + s.deadline,
                    p_source_namespace => s.source_namespace, p_source_uid => s.source_uid) c;
                v_outcome := coalesce(v_outcome, 'fired');
            end if;
        exception when others then
            get stacked diagnostics v_state = returned_sqlstate, v_error = message_text;
            if left(v_state, 2) in ('40', '53', '57', '58', 'XX') or v_state = '55P03' then
                raise;
            end if;
            v_outcome := 'failed';
            v_run := null;
            v_missed := '{}';
            if v_next is null or v_next <= v_tick then
                v_next := workflow.far_future();
            end if;
        end;

        return query select s.id, m.t, null::uuid, 'missed'::text from unnest(v_missed) m(t) order by m.t;
        return query select s.id, v_tick, v_run, v_outcome;
        update workflow.workflow_schedule sc
        set last_tick_at = v_tick, last_outcome = v_outcome, last_error = left(v_error, 8192),
            last_fired_run = coalesce(v_run, sc.last_fired_run), next_tick_at = v_next
        where sc.id = s.id;
    end loop;
end
$$;


-- ---------------------------------------------------------------------------
-- Reading schedules
-- ---------------------------------------------------------------------------

-- list_schedules lists schedules for the console and the operator, by
-- namespace then name: every one (p_source_namespace null), the SQL ones
-- (''), or one namespace's; one name (p_name) or all; and, when
-- p_namespaces is not null, only schedules of those namespaces (a SQL
-- schedule is of none). Each with its next and last tick and how many of
-- its runs are unfinished (pending or leased), counted by key prefix on
-- idx_workflow_run_schedule_key. Reads only; no locks.
create or replace function workflow.list_schedules(
    p_source_namespace text default null,
    p_name text default null,
    p_namespaces text[] default null
) returns table (
    id uuid, name text, source_namespace text, source_uid text, cron text, time_zone text, type text,
    payload jsonb, priority integer, max_attempts integer, deadline interval, concurrency_policy text,
    starting_deadline_seconds integer, suspend boolean, next_tick_at timestamptz, last_tick_at timestamptz,
    last_outcome text, last_error text, last_fired_run uuid, unfinished_runs bigint, created_by text,
    created_at timestamptz, updated_at timestamptz
)
language sql stable security definer
set search_path = pg_catalog, pg_temp
as $$
    select sc.id, sc.name, sc.source_namespace, sc.source_uid, sc.cron, sc.time_zone, sc.type, sc.payload,
           sc.priority, sc.max_attempts, sc.deadline, sc.concurrency_policy, sc.starting_deadline_seconds,
           sc.suspend, sc.next_tick_at, sc.last_tick_at, sc.last_outcome, sc.last_error, sc.last_fired_run,
           (select count(*) from workflow.workflow_run r
            where r.idempotency_key collate "C" >= k.lo and r.idempotency_key collate "C" < k.hi
              and r.status in ('pending', 'leased')
              and (starts_with(r.idempotency_key, 'schedule:')
                   or (starts_with(r.idempotency_key, 'k8s:') and strpos(r.idempotency_key, ':schedule/') > 0))),
           sc.created_by, sc.created_at, sc.updated_at
    from workflow.workflow_schedule sc
    cross join lateral workflow.schedule_key_range(sc.id, sc.source_namespace, sc.name) k
    where (p_source_namespace is null or coalesce(sc.source_namespace, '') = p_source_namespace)
      and (p_name is null or sc.name = p_name)
      and (p_namespaces is null or sc.source_namespace = any (p_namespaces))
    order by coalesce(sc.source_namespace, ''), sc.name
$$;


-- Nothing here is callable by PUBLIC; see the list at the top for who
-- should be granted what.
revoke all on function
    workflow.cron_field(text, text, integer, integer, text[], boolean),
    workflow.cron_fields(text),
    workflow.cron_instant(timestamp, text),
    workflow.cron_tick(workflow.cron_spec, text, timestamptz),
    workflow.cron_next(text, text, timestamptz),
    workflow.cron_problem(text, text),
    workflow.time_zone_problem(text, boolean),
    workflow.schedule_payload_problem(jsonb),
    workflow.on_schedule_written(),
    workflow.schedule_key(uuid, text, text, timestamptz),
    workflow.schedule_key_range(uuid, text, text),
    workflow.schedule_caller_is_owner(),
    workflow.put_schedule(text, text, text, jsonb, text, integer, integer, interval, text, integer, boolean, text, text),
    workflow.delete_schedule(text, text),
    workflow.fire_due_schedules(integer),
    workflow.list_schedules(text, text, text[])
from public;
