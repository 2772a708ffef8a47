package engine_test

// Cron schedules fired by the database: every tick of a schedule records
// exactly one run, whoever calls workflow.fire_due_schedules and however
// many call it at once; missed ticks, concurrency policies, suspension,
// daylight saving, hostile input and runs that are none of a schedule's
// business.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	_ "time/tzdata" // the zones of the daylight-saving tests, whatever the machine has

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// setupSchedules is setup, for the schedule tests.
func setupSchedules(t *testing.T) *bundle {
	t.Helper()
	b := setup(t)
	return b
}

// sqlKey is the idempotency key of the run a SQL schedule records for tick.
func sqlKey(scheduleID string, tick time.Time) string {
	return "schedule:" + scheduleID + ":" + tick.UTC().Format("2006-01-02T15:04:05Z")
}

// k8sKey is the idempotency key of the run a mirrored schedule records for tick.
func k8sKey(namespace, name string, tick time.Time) string {
	return fmt.Sprintf("k8s:%s:schedule/%s/%d", namespace, name, tick.Unix())
}

func (b *bundle) putSchedule(t *testing.T, spec engine.ScheduleSpec) engine.Schedule {
	t.Helper()
	s, err := b.eng.PutSchedule(b.ctx, spec)
	if err != nil {
		t.Fatalf("put schedule %s: %v", spec.Name, err)
	}
	return s
}

func (b *bundle) getSchedule(t *testing.T, namespace, name string) engine.Schedule {
	t.Helper()
	s, err := b.eng.GetSchedule(b.ctx, namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (b *bundle) fire(t *testing.T) []engine.ScheduleFiring {
	t.Helper()
	got, err := b.eng.FireDueSchedules(b.ctx, 100)
	if err != nil {
		t.Fatalf("fire due schedules: %v", err)
	}
	return got
}

// clockTo moves the database clock forward to at least at (it never goes back).
func (b *bundle) clockTo(t *testing.T, at time.Time) {
	t.Helper()
	if d := at.Sub(b.clockNow(t)); d > 0 {
		b.advanceClock(t, d)
	}
}

// keyedRuns lists the runs whose idempotency key starts with prefix: key -> status.
func (b *bundle) keyedRuns(t *testing.T, prefix string) map[string]string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `select idempotency_key, status from workflow.workflow_run
		where starts_with(idempotency_key, $1)`, prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, s string
		if err := rows.Scan(&k, &s); err != nil {
			t.Fatal(err)
		}
		out[k] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// createdEvents counts the 'created' events of runs whose key starts with prefix.
func (b *bundle) createdEvents(t *testing.T, prefix string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.run_event e
		join workflow.workflow_run r on r.id = e.workflow_id
		where e.event_type = 'created' and starts_with(r.idempotency_key, $1)`, prefix).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func outcomes(fs []engine.ScheduleFiring, id string) []engine.FiringOutcome {
	var out []engine.FiringOutcome
	for _, f := range fs {
		if f.ScheduleID == id {
			out = append(out, f.Outcome)
		}
	}
	return out
}

func TestSchedulePutAndList(t *testing.T) {
	b := setupSchedules(t)
	now := b.clockNow(t)
	prio := 7
	start := 90 * time.Second
	s := b.putSchedule(t, engine.ScheduleSpec{
		Name: "nightly-report", Cron: "30 2 * * *", TimeZone: "Europe/Berlin", Type: "reports.nightly.v1",
		Payload: json.RawMessage(`{"format":"pdf"}`), Priority: &prio, MaxAttempts: 5, Deadline: 2 * time.Hour,
		ConcurrencyPolicy: engine.ConcurrencyForbid, StartingDeadline: &start,
	})
	want, err := b.cronNext("30 2 * * *", "Europe/Berlin", now)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID == "" || !s.NextTickAt.Equal(want) || s.NextTickAt.Before(now) {
		t.Fatalf("new schedule: id %q, next tick %s, want %s", s.ID, s.NextTickAt, want)
	}
	if s.Cron != "30 2 * * *" || s.TimeZone != "Europe/Berlin" || s.Type != "reports.nightly.v1" ||
		string(s.Payload) != `{"format": "pdf"}` || s.Priority == nil || *s.Priority != 7 || s.MaxAttempts != 5 ||
		s.Deadline != 2*time.Hour || s.ConcurrencyPolicy != engine.ConcurrencyForbid ||
		s.StartingDeadline == nil || *s.StartingDeadline != 90*time.Second || s.Suspend || s.Namespace != "" ||
		s.LastTickAt != nil || s.LastOutcome != "" || s.UnfinishedRuns != 0 || s.CreatedBy == "" {
		t.Errorf("stored schedule: %+v", s)
	}

	// The same put again changes nothing; another payload keeps the tick.
	b.advanceClock(t, time.Hour)
	again := b.putSchedule(t, engine.ScheduleSpec{
		Name: "nightly-report", Cron: "30 2 * * *", TimeZone: "Europe/Berlin", Type: "reports.nightly.v1",
		Payload: json.RawMessage(`{"format":"pdf"}`), Priority: &prio, MaxAttempts: 5, Deadline: 2 * time.Hour,
		ConcurrencyPolicy: engine.ConcurrencyForbid, StartingDeadline: &start,
	})
	if again.ID != s.ID || !again.UpdatedAt.Equal(s.UpdatedAt) || !again.NextTickAt.Equal(s.NextTickAt) {
		t.Errorf("unchanged put: %+v, was %+v", again, s)
	}
	csv := b.putSchedule(t, engine.ScheduleSpec{
		Name: "nightly-report", Cron: "30 2 * * *", TimeZone: "Europe/Berlin", Type: "reports.nightly.v1",
		Payload: json.RawMessage(`{"format":"csv"}`),
	})
	if csv.ID != s.ID || !csv.NextTickAt.Equal(s.NextTickAt) || string(csv.Payload) != `{"format": "csv"}` ||
		csv.Priority == nil || *csv.Priority != 100 || csv.MaxAttempts != 3 || csv.Deadline != 0 ||
		csv.ConcurrencyPolicy != engine.ConcurrencyAllow || csv.StartingDeadline != nil {
		t.Errorf("put with another payload and defaults: %+v", csv)
	}
	// A new zone moves the tick: computed again from the clock.
	ny := b.putSchedule(t, engine.ScheduleSpec{
		Name: "nightly-report", Cron: "30 2 * * *", TimeZone: "America/New_York", Type: "reports.nightly.v1",
	})
	want, _ = b.cronNext("30 2 * * *", "America/New_York", b.clockNow(t))
	if !ny.NextTickAt.Equal(want) {
		t.Errorf("new zone: next tick %s, want %s", ny.NextTickAt, want)
	}

	// A mirrored schedule of the same name is another schedule.
	k := b.putSchedule(t, engine.ScheduleSpec{
		Namespace: "shop", UID: "uid-1", Name: "nightly-report", Cron: "@hourly", Type: "reports.nightly.v1",
	})
	if k.ID == s.ID || k.Namespace != "shop" || k.UID != "uid-1" || k.TimeZone != "UTC" {
		t.Errorf("mirrored schedule: %+v", k)
	}
	for _, c := range []struct {
		f    engine.ScheduleFilter
		want []string
	}{
		{engine.ScheduleFilter{}, []string{"/nightly-report", "shop/nightly-report"}},
		{engine.ScheduleFilter{Direct: true}, []string{"/nightly-report"}},
		{engine.ScheduleFilter{Namespace: "shop"}, []string{"shop/nightly-report"}},
		{engine.ScheduleFilter{Namespace: "other"}, nil},
		{engine.ScheduleFilter{Namespaces: []string{"shop"}}, []string{"shop/nightly-report"}},
		{engine.ScheduleFilter{Namespaces: []string{}}, nil},
		{engine.ScheduleFilter{Name: "nope"}, nil},
	} {
		got, err := b.eng.ListSchedules(b.ctx, c.f)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, g := range got {
			names = append(names, g.Namespace+"/"+g.Name)
		}
		if strings.Join(names, ",") != strings.Join(c.want, ",") {
			t.Errorf("list %+v: %v, want %v", c.f, names, c.want)
		}
	}

	if ok, err := b.eng.DeleteSchedule(b.ctx, "", "nightly-report"); err != nil || !ok {
		t.Fatalf("delete: %v %v", ok, err)
	}
	if ok, err := b.eng.DeleteSchedule(b.ctx, "", "nightly-report"); err != nil || ok {
		t.Fatalf("delete again: %v %v", ok, err)
	}
	if _, err := b.eng.GetSchedule(b.ctx, "", "nightly-report"); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("get deleted: %v", err)
	}
	if _, err := b.eng.GetSchedule(b.ctx, "shop", "nightly-report"); err != nil {
		t.Errorf("the mirrored one stays: %v", err)
	}
}

// Every tick fires once, one after the other, with the run the schedule
// describes and the key that names the schedule and the tick.
func TestScheduleFiresEachTick(t *testing.T) {
	b := setupSchedules(t)
	prio := 3
	s := b.putSchedule(t, engine.ScheduleSpec{
		Name: "every-minute", Cron: "* * * * *", Type: "sched.tick.v1", Payload: json.RawMessage(`{"n":1}`),
		Priority: &prio, MaxAttempts: 2, Deadline: time.Hour,
	})
	if got := b.fire(t); len(got) != 0 {
		t.Fatalf("nothing is due yet, fired %+v", got)
	}
	tick := s.NextTickAt
	var runs []string
	for i := range 5 {
		b.clockTo(t, tick.Add(time.Second))
		got := b.fire(t)
		if len(got) != 1 || got[0].ScheduleID != s.ID || !got[0].Tick.Equal(tick) ||
			got[0].Outcome != engine.FiringFired || got[0].RunID == "" {
			t.Fatalf("tick %d (%s): fired %+v", i, tick, got)
		}
		if again := b.fire(t); len(again) != 0 {
			t.Fatalf("tick %d fired again: %+v", i, again)
		}
		run := b.get(t, got[0].RunID)
		if run.IdempotencyKey != sqlKey(s.ID, tick) || run.Type != "sched.tick.v1" || string(run.Payload) != `{"n": 1}` ||
			run.Priority != 3 || run.MaxAttempts != 2 || run.Status != engine.StatusPending || run.Source != nil ||
			run.DeadlineAt == nil || run.DeadlineAt.Sub(run.CreatedAt) < 59*time.Minute {
			t.Errorf("tick %d: run %+v", i, run)
		}
		if ev := b.eventTypes(t, run.ID); len(ev) != 1 || ev[0] != engine.EventCreated {
			t.Errorf("tick %d: events %v", i, ev)
		}
		after := b.getSchedule(t, "", "every-minute")
		if after.LastTickAt == nil || !after.LastTickAt.Equal(tick) || after.LastOutcome != engine.FiringFired ||
			after.LastFiredRun != run.ID || !after.NextTickAt.Equal(tick.Add(time.Minute)) ||
			after.UnfinishedRuns != int64(i+1) {
			t.Errorf("tick %d: schedule %+v", i, after)
		}
		runs = append(runs, run.ID)
		tick = tick.Add(time.Minute)
	}
	distinct := map[string]bool{}
	for _, id := range runs {
		distinct[id] = true
	}
	if len(distinct) != 5 {
		t.Errorf("the five ticks fired %d distinct runs (%v), want 5", len(distinct), runs)
	}
	prefix := "schedule:" + s.ID + ":"
	if n := len(b.keyedRuns(t, prefix)); n != 5 {
		t.Errorf("%d runs, want 5", n)
	}
	if n := b.createdEvents(t, prefix); n != 5 {
		t.Errorf("%d created events, want 5", n)
	}
}

// Two and eight callers fire at once in a loop while the clock moves tick
// by tick: every tick of every schedule has exactly one run and one
// 'created' event, and exactly one caller reports firing it.
func TestScheduleExactlyOnceConcurrently(t *testing.T) {
	for _, callers := range []int{2, 8} {
		t.Run(fmt.Sprintf("%d callers", callers), func(t *testing.T) {
			b := setupSchedules(t)
			const nSchedules, nTicks = 4, 15
			// The four are made within one minute of the database's clock
			// (moved to a second past the next whole minute), so that
			// their first ticks are the same: made across a minute's end,
			// the later ones would have no run at the first tick.
			b.clockTo(t, b.clockNow(t).Truncate(time.Minute).Add(time.Minute+time.Second))
			var ids []string
			var first time.Time
			for i := range nSchedules {
				spec := engine.ScheduleSpec{Name: fmt.Sprintf("race-%d", i), Cron: "* * * * *", Type: "sched.race.v1"}
				if i%2 == 1 {
					spec.Namespace, spec.UID = "team", fmt.Sprintf("uid-%d", i)
				}
				s := b.putSchedule(t, spec)
				ids = append(ids, s.ID)
				if first.IsZero() {
					first = s.NextTickAt
				} else if !s.NextTickAt.Equal(first) {
					t.Fatalf("schedule %d's first tick is %s, the first one's %s", i, s.NextTickAt, first)
				}
			}
			var mu sync.Mutex
			var fired []engine.ScheduleFiring
			var callErrs []error
			ctx, stop := context.WithCancel(b.ctx)
			var wg sync.WaitGroup
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						// A call in flight when the test stops still ends
						// and reports what it fired: the stop ends the loop,
						// not the call.
						got, err := b.eng.FireDueSchedules(b.ctx, 100)
						mu.Lock()
						if err != nil {
							callErrs = append(callErrs, err)
						}
						fired = append(fired, got...)
						mu.Unlock()
					}
				}()
			}
			tick := first
			for i := range nTicks {
				b.clockTo(t, tick.Add(time.Second))
				// Wait until the callers fired this tick everywhere.
				deadline := time.Now().Add(30 * time.Second)
				for {
					var done int
					if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_schedule
						where last_tick_at >= $1`, tick).Scan(&done); err != nil {
						t.Fatal(err)
					}
					if done == nSchedules {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("tick %d (%s) not fired by %d callers within 30 s", i, tick, callers)
					}
					time.Sleep(2 * time.Millisecond)
				}
				tick = tick.Add(time.Minute)
			}
			stop()
			wg.Wait()
			if len(callErrs) > 0 {
				t.Fatalf("callers failed: %v", callErrs)
			}

			perTick := map[string]int{}
			for _, f := range fired {
				if f.Outcome != engine.FiringFired {
					t.Errorf("outcome %+v, want only fired", f)
				}
				perTick[f.ScheduleID+"@"+f.Tick.UTC().Format(time.RFC3339)]++
			}
			for i, id := range ids {
				spec := b.getSchedule(t, map[bool]string{true: "team"}[i%2 == 1], fmt.Sprintf("race-%d", i))
				prefix := "schedule:" + id + ":"
				if spec.Namespace != "" {
					prefix = "k8s:team:schedule/" + spec.Name + "/"
				}
				runs := b.keyedRuns(t, prefix)
				for j := range nTicks {
					at := first.Add(time.Duration(j) * time.Minute)
					key := sqlKey(id, at)
					if spec.Namespace != "" {
						key = k8sKey("team", spec.Name, at)
					}
					if _, ok := runs[key]; !ok {
						t.Errorf("schedule %s: no run for tick %s", spec.Name, at)
					}
					if n := perTick[id+"@"+at.UTC().Format(time.RFC3339)]; n != 1 {
						t.Errorf("schedule %s, tick %s: reported fired %d times", spec.Name, at, n)
					}
				}
				if len(runs) != nTicks {
					t.Errorf("schedule %s: %d runs, want %d", spec.Name, len(runs), nTicks)
				}
				if n := b.createdEvents(t, prefix); n != nTicks {
					t.Errorf("schedule %s: %d created events, want %d", spec.Name, n, nTicks)
				}
			}
		})
	}
}

// A caller that dies holding a schedule it was firing (its backend
// terminated, or its context cancelled mid-transaction) leaves the tick to
// the next caller, which fires it once.
func TestScheduleCallerKilled(t *testing.T) {
	for _, how := range []string{"terminated", "cancelled"} {
		t.Run(how, func(t *testing.T) {
			b := setupSchedules(t)
			s := b.putSchedule(t, engine.ScheduleSpec{Name: "fragile", Cron: "*/5 * * * *", Type: "sched.fragile.v1"})
			b.clockTo(t, s.NextTickAt.Add(time.Second))

			conn, err := b.pool.Acquire(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			var pid int
			if err := conn.QueryRow(b.ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
				t.Fatal(err)
			}
			// A client that goes away mid-statement ends its backend at once
			// (not at the statement's end).
			if _, err := conn.Exec(b.ctx, "set client_connection_check_interval = '100ms'"); err != nil {
				t.Fatal(err)
			}
			tx, err := conn.Begin(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			var doomedRun, outcome string
			if err := tx.QueryRow(b.ctx, "select run_id::text, outcome from workflow.fire_due_schedules(10)").
				Scan(&doomedRun, &outcome); err != nil || outcome != "fired" {
				t.Fatalf("the first caller: %q %v", outcome, err)
			}
			// While it holds the schedule, another caller skips it.
			if got := b.fire(t); len(got) != 0 {
				t.Fatalf("a second caller fired a locked schedule: %+v", got)
			}
			switch how {
			case "terminated":
				var ok bool
				if err := b.pool.QueryRow(b.ctx, "select pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
					t.Fatalf("terminate %d: %v %v", pid, ok, err)
				}
			case "cancelled":
				ctx, cancel := context.WithTimeout(b.ctx, 200*time.Millisecond)
				_, err := tx.Exec(ctx, "select pg_sleep(60)")
				cancel()
				if err == nil {
					t.Fatal("the sleep was not cancelled")
				}
			}
			_ = tx.Rollback(b.ctx)

			var got []engine.ScheduleFiring
			deadline := time.Now().Add(30 * time.Second)
			for len(got) == 0 && time.Now().Before(deadline) {
				got = b.fire(t) // the dead caller's lock goes when its backend has gone
				time.Sleep(10 * time.Millisecond)
			}
			if len(got) != 1 || got[0].Outcome != engine.FiringFired || !got[0].Tick.Equal(s.NextTickAt) ||
				got[0].RunID == doomedRun {
				t.Fatalf("the next caller: %+v (the dead one's run was %s)", got, doomedRun)
			}
			if again := b.fire(t); len(again) != 0 {
				t.Fatalf("fired again: %+v", again)
			}
			prefix := "schedule:" + s.ID + ":"
			if runs := b.keyedRuns(t, prefix); len(runs) != 1 || runs[sqlKey(s.ID, s.NextTickAt)] != "pending" {
				t.Errorf("runs %v", runs)
			}
			if n := b.createdEvents(t, prefix); n != 1 {
				t.Errorf("%d created events, want 1", n)
			}
			if _, err := b.eng.GetRun(b.ctx, doomedRun); !errors.Is(err, engine.ErrNotFound) {
				t.Errorf("the dead caller's run: %v", err)
			}
		})
	}
}

// Only the most recent due tick starts; with a starting deadline, not even
// that one when it is too old. Past 100 due ticks the latest is found
// without walking them all.
func TestScheduleMissedTicks(t *testing.T) {
	b := setupSchedules(t)
	sixty := 60 * time.Second
	plain := b.putSchedule(t, engine.ScheduleSpec{Name: "plain", Cron: "*/5 * * * *", Type: "sched.missed.v1"})
	strict := b.putSchedule(t, engine.ScheduleSpec{Name: "strict", Cron: "*/5 * * * *", Type: "sched.missed.v1",
		StartingDeadline: &sixty})
	minutely := b.putSchedule(t, engine.ScheduleSpec{Name: "minutely", Cron: "* * * * *", Type: "sched.missed.v1",
		Suspend: true})
	t1 := plain.NextTickAt
	if !strict.NextTickAt.Equal(t1) {
		t.Fatalf("same cron, other ticks: %s %s", t1, strict.NextTickAt)
	}

	// 27 minutes later: six ticks are due (t1 ... t1+25).
	b.clockTo(t, t1.Add(27*time.Minute))
	got := b.fire(t)
	want := []engine.FiringOutcome{"missed", "missed", "missed", "missed", "missed", "fired"}
	if o := outcomes(got, plain.ID); fmt.Sprint(o) != fmt.Sprint(want) {
		t.Errorf("plain: %v, want %v", o, want)
	}
	latest := t1.Add(25 * time.Minute)
	for _, f := range got {
		if f.ScheduleID == plain.ID && f.Outcome == engine.FiringFired &&
			(!f.Tick.Equal(latest) || b.get(t, f.RunID).IdempotencyKey != sqlKey(plain.ID, latest)) {
			t.Errorf("plain fired %+v, want the tick %s", f, latest)
		}
	}
	// The strict one's latest tick is two minutes old: missed as well.
	if o := outcomes(got, strict.ID); fmt.Sprint(o) != fmt.Sprint([]engine.FiringOutcome{"missed", "missed", "missed", "missed", "missed", "missed"}) {
		t.Errorf("strict: %v, want six missed", o)
	}
	if runs := b.keyedRuns(t, "schedule:"+strict.ID+":"); len(runs) != 0 {
		t.Errorf("strict recorded %v", runs)
	}
	if runs := b.keyedRuns(t, "schedule:"+plain.ID+":"); len(runs) != 1 {
		t.Errorf("plain recorded %v", runs)
	}
	st := b.getSchedule(t, "", "strict")
	if st.LastOutcome != engine.FiringMissed || !st.LastTickAt.Equal(latest) || st.LastFiredRun != "" ||
		!st.NextTickAt.Equal(t1.Add(30*time.Minute)) {
		t.Errorf("strict after missing: %+v", st)
	}
	// Ten seconds late is within its deadline.
	b.clockTo(t, t1.Add(30*time.Minute+10*time.Second))
	got = b.fire(t)
	if o := outcomes(got, strict.ID); fmt.Sprint(o) != "[fired]" {
		t.Errorf("strict within its deadline: %v", o)
	}

	// Three hours of minutes: 100 reported missed, the most recent fired.
	b.putSchedule(t, engine.ScheduleSpec{Name: "minutely", Cron: "* * * * *", Type: "sched.missed.v1"})
	b.clockTo(t, b.clockNow(t).Add(3*time.Hour))
	got = b.fire(t)
	now := b.clockNow(t)
	var missed int
	var last engine.ScheduleFiring
	for _, f := range got {
		if f.ScheduleID != minutely.ID {
			continue
		}
		if f.Outcome == engine.FiringMissed {
			missed++
		}
		last = f
	}
	if missed != 100 || last.Outcome != engine.FiringFired || last.Tick.After(now) ||
		now.Sub(last.Tick) >= 2*time.Minute || last.Tick.Second() != 0 {
		t.Errorf("minutely after three hours: %d missed, last %+v (now %s)", missed, last, now)
	}
	m := b.getSchedule(t, "", "minutely")
	if !m.NextTickAt.Equal(last.Tick.Add(time.Minute)) || m.LastFiredRun != last.RunID {
		t.Errorf("minutely: %+v", m)
	}
}

// At the walk's bound: with 101 ticks due, 100 are missed and the 101st
// fires; with 102, the 101st is passed over unlisted and the 102nd fires.
func TestScheduleMissedAtTheBound(t *testing.T) {
	for _, due := range []int{100, 101, 102, 103} {
		t.Run(fmt.Sprint(due), func(t *testing.T) {
			b := setupSchedules(t)
			s := b.putSchedule(t, engine.ScheduleSpec{Name: "minutely", Cron: "* * * * *", Type: "sched.bound.v1"})
			latest := s.NextTickAt.Add(time.Duration(due-1) * time.Minute)
			b.clockTo(t, latest.Add(time.Second))
			got := b.fire(t)
			wantMissed := min(due-1, 100)
			if len(got) != wantMissed+1 {
				t.Fatalf("%d rows, want %d", len(got), wantMissed+1)
			}
			for i, f := range got[:wantMissed] {
				if f.Outcome != engine.FiringMissed || !f.Tick.Equal(s.NextTickAt.Add(time.Duration(i)*time.Minute)) {
					t.Errorf("row %d: %+v", i, f)
				}
			}
			if last := got[wantMissed]; last.Outcome != engine.FiringFired || !last.Tick.Equal(latest) {
				t.Errorf("last row %+v, want fired at %s", last, latest)
			}
			if after := b.getSchedule(t, "", "minutely"); !after.NextTickAt.Equal(latest.Add(time.Minute)) {
				t.Errorf("next tick %s, want %s", after.NextTickAt, latest.Add(time.Minute))
			}
			if runs := b.keyedRuns(t, "schedule:"+s.ID+":"); len(runs) != 1 {
				t.Errorf("runs %v", runs)
			}
		})
	}
}

// Forbid skips a tick while a run of the schedule is pending or leased,
// and fires again once it finished.
func TestScheduleForbid(t *testing.T) {
	b := setupSchedules(t)
	s := b.putSchedule(t, engine.ScheduleSpec{Name: "one-at-a-time", Cron: "* * * * *", Type: "sched.forbid.v1",
		ConcurrencyPolicy: engine.ConcurrencyForbid})
	tick := s.NextTickAt
	step := func(want engine.FiringOutcome) engine.ScheduleFiring {
		t.Helper()
		b.clockTo(t, tick.Add(time.Second))
		got := b.fire(t)
		if len(got) != 1 || got[0].Outcome != want || !got[0].Tick.Equal(tick) {
			t.Fatalf("tick %s: %+v, want %s", tick, got, want)
		}
		tick = tick.Add(time.Minute)
		return got[0]
	}
	first := step(engine.FiringFired)
	if n := b.getSchedule(t, "", "one-at-a-time").UnfinishedRuns; n != 1 {
		t.Errorf("unfinished runs %d, want 1", n)
	}
	step(engine.FiringSkippedForbid) // pending
	claimed := b.claim(t, "w1", []string{"sched.forbid."}, 10)
	if len(claimed) != 1 || claimed[0].ID != first.RunID {
		t.Fatalf("claimed %+v", claimed)
	}
	step(engine.FiringSkippedForbid) // leased
	if got := b.getSchedule(t, "", "one-at-a-time"); got.LastOutcome != engine.FiringSkippedForbid || got.LastFiredRun != first.RunID {
		t.Errorf("after skipping: %+v", got)
	}
	if _, err := b.eng.CompleteRuns(b.ctx, "w1", []engine.Completion{{LeaseRef: claimed[0].Ref()}}); err != nil {
		t.Fatal(err)
	}
	second := step(engine.FiringFired)
	if second.RunID == first.RunID || b.get(t, first.RunID).Status != engine.StatusSucceeded {
		t.Errorf("after the run finished: %+v", second)
	}
	if runs := b.keyedRuns(t, "schedule:"+s.ID+":"); len(runs) != 2 {
		t.Errorf("runs %v, want 2", runs)
	}
}

// Replace cancels the unfinished runs of the schedule (through cancel_run:
// a 'cancelled' event naming the schedule) and records the new one.
func TestScheduleReplace(t *testing.T) {
	b := setupSchedules(t)
	s := b.putSchedule(t, engine.ScheduleSpec{Namespace: "shop", UID: "uid-r", Name: "latest-only", Cron: "* * * * *",
		Type: "sched.replace.v1", ConcurrencyPolicy: engine.ConcurrencyReplace})
	tick := s.NextTickAt
	b.clockTo(t, tick.Add(time.Second))
	first := b.fire(t)
	if len(first) != 1 || first[0].Outcome != engine.FiringFired {
		t.Fatalf("first tick: %+v", first)
	}
	claimed := b.claimIn(t, "shop", "w1", []string{"sched.replace."}, 10)
	if len(claimed) != 1 || claimed[0].ID != first[0].RunID {
		t.Fatalf("claimed %+v", claimed)
	}
	b.clockTo(t, tick.Add(time.Minute+time.Second))
	second := b.fire(t)
	if len(second) != 1 || second[0].Outcome != engine.FiringReplaced || second[0].RunID == first[0].RunID ||
		!second[0].Tick.Equal(tick.Add(time.Minute)) {
		t.Fatalf("second tick: %+v", second)
	}
	old := b.get(t, first[0].RunID)
	if old.Status != engine.StatusCancelled || old.FinishedAt == nil {
		t.Errorf("replaced run: %+v", old)
	}
	evs, err := b.eng.ListEvents(b.ctx, old.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Type != engine.EventCancelled || !strings.Contains(string(last.Data), `"by": "schedule shop/latest-only"`) ||
		!strings.Contains(string(last.Data), `"previous_status": "leased"`) {
		t.Errorf("cancelled event: %s %s", last.Type, last.Data)
	}
	if nw := b.get(t, second[0].RunID); nw.Status != engine.StatusPending ||
		nw.IdempotencyKey != k8sKey("shop", "latest-only", tick.Add(time.Minute)) {
		t.Errorf("new run: %+v", nw)
	}
	if got := b.getSchedule(t, "shop", "latest-only"); got.UnfinishedRuns != 1 || got.LastOutcome != engine.FiringReplaced {
		t.Errorf("schedule: %+v", got)
	}
	// With nothing unfinished, Replace simply fires.
	if _, err := b.eng.CancelRun(b.ctx, second[0].RunID); err != nil {
		t.Fatal(err)
	}
	b.clockTo(t, tick.Add(2*time.Minute+time.Second))
	if third := b.fire(t); len(third) != 1 || third[0].Outcome != engine.FiringFired {
		t.Errorf("third tick: %+v", third)
	}
}

// A suspended schedule does not fire; resumed, it counts from then.
func TestScheduleSuspend(t *testing.T) {
	b := setupSchedules(t)
	spec := engine.ScheduleSpec{Name: "paused", Cron: "*/10 * * * *", Type: "sched.suspend.v1", Suspend: true}
	s := b.putSchedule(t, spec)
	b.clockTo(t, s.NextTickAt.Add(25*time.Minute))
	if got := b.fire(t); len(got) != 0 {
		t.Fatalf("a suspended schedule fired: %+v", got)
	}
	spec.Suspend = false
	resumed := b.putSchedule(t, spec)
	now := b.clockNow(t)
	if !resumed.NextTickAt.After(now) || resumed.NextTickAt.Sub(now) > 10*time.Minute {
		t.Errorf("resumed: next tick %s, now %s", resumed.NextTickAt, now)
	}
	if got := b.fire(t); len(got) != 0 {
		t.Errorf("the ticks missed while suspended fired on resume: %+v", got)
	}
	b.clockTo(t, resumed.NextTickAt.Add(time.Second))
	if got := b.fire(t); len(got) != 1 || got[0].Outcome != engine.FiringFired || !got[0].Tick.Equal(resumed.NextTickAt) {
		t.Errorf("after resuming: %+v", got)
	}
	// Suspended while due: nothing.
	spec.Suspend = true
	b.putSchedule(t, spec)
	b.clockTo(t, resumed.NextTickAt.Add(10*time.Minute+time.Second))
	if got := b.fire(t); len(got) != 0 {
		t.Errorf("suspended while due, fired: %+v", got)
	}
}

// A schedule mirrored from Kubernetes records runs under the operator's
// key form, so a WorkflowRun with spec.idempotencyKey schedule/<name>/<unix>
// adopts the tick's run instead of recording another.
func TestScheduleKubernetesKey(t *testing.T) {
	b := setupSchedules(t)
	s := b.putSchedule(t, engine.ScheduleSpec{Namespace: "shop", UID: "0c9e-uid", Name: "nightly", Cron: "0 * * * *",
		Type: "sched.k8s.v1", Payload: json.RawMessage(`{"a":1}`)})
	b.clockTo(t, s.NextTickAt.Add(time.Second))
	got := b.fire(t)
	if len(got) != 1 || got[0].Outcome != engine.FiringFired {
		t.Fatalf("fired %+v", got)
	}
	run := b.get(t, got[0].RunID)
	key := fmt.Sprintf("k8s:shop:schedule/nightly/%d", s.NextTickAt.Unix())
	if run.IdempotencyKey != key || run.Source == nil || run.Source.Namespace != "shop" || run.Source.UID != "0c9e-uid" ||
		run.Source.Name != fmt.Sprintf("nightly-%d", s.NextTickAt.Unix()) {
		t.Fatalf("run %+v, source %+v, want key %s", run, run.Source, key)
	}
	// What the operator records for a WorkflowRun shop/nightly-<unix> with
	// spec.idempotencyKey schedule/nightly/<unix>.
	res, err := b.eng.CreateRun(b.ctx, engine.CreateParams{
		Type: "sched.k8s.v1", Payload: json.RawMessage(`{"a":1}`), IdempotencyKey: key,
		Source: &engine.Source{Namespace: "shop", Name: fmt.Sprintf("nightly-%d", s.NextTickAt.Unix()), UID: "wfr-uid"},
	})
	if err != nil || res.Created || res.ID != run.ID {
		t.Errorf("the WorkflowRun's record: %+v %v, want the tick's run %s", res, err, run.ID)
	}
}

// Runs that are not a schedule's (another type, another namespace, a
// schedule whose name merely starts alike, keys without a schedule) are
// neither counted nor cancelled nor changed by firing.
func TestScheduleBystanders(t *testing.T) {
	b := setupSchedules(t)
	// Both schedules are made in one minute, so that their next ticks are
	// the same (made across a minute's end, the second's came a minute
	// later and a firing found one schedule due, not two).
	b.clockTo(t, b.clockNow(t).Truncate(time.Minute).Add(time.Minute+time.Second))
	sqlS := b.putSchedule(t, engine.ScheduleSpec{Name: "nightly", Cron: "* * * * *", Type: "sched.mine.v1",
		ConcurrencyPolicy: engine.ConcurrencyReplace})
	k8sS := b.putSchedule(t, engine.ScheduleSpec{Namespace: "shop", UID: "u", Name: "nightly", Cron: "* * * * *",
		Type: "sched.mine.v1", ConcurrencyPolicy: engine.ConcurrencyReplace})
	if !k8sS.NextTickAt.Equal(sqlS.NextTickAt) {
		t.Fatalf("the schedules' next ticks differ: %s and %s", sqlS.NextTickAt, k8sS.NextTickAt)
	}
	bystanders := []engine.CreateParams{
		{Type: "other.thing.v1"},
		{Type: "sched.mine.v1", IdempotencyKey: "schedule:not-a-uuid:1"},
		{Type: "sched.mine.v1", IdempotencyKey: "schedule:" + sqlS.ID + "x:1"},
		{Type: "sched.mine.v1", IdempotencyKey: "schedule:" + sqlS.ID + ";"},
		{Type: "sched.mine.v1", IdempotencyKey: "k8s:shop:schedule/nightly0", Source: &engine.Source{Namespace: "shop", Name: "o5", UID: "x5"}},
		{Type: "sched.mine.v1", IdempotencyKey: "k8s:shop:schedule/nightly./1", Source: &engine.Source{Namespace: "shop", Name: "o6", UID: "x6"}},
		{Type: "sched.mine.v1", IdempotencyKey: "schedule:" + sqlS.ID},
		{Type: "sched.mine.v1", IdempotencyKey: "k8s:shop:schedule/nightly-2/1",
			Source: &engine.Source{Namespace: "shop", Name: "other", UID: "x1"}},
		{Type: "sched.mine.v1", IdempotencyKey: "k8s:shop:schedule/nightly", Source: &engine.Source{Namespace: "shop", Name: "o2", UID: "x2"}},
		{Type: "sched.mine.v1", IdempotencyKey: "k8s:other:schedule/nightly/1",
			Source: &engine.Source{Namespace: "other", Name: "other", UID: "x3"}},
		{Type: "sched.mine.v1", IdempotencyKey: "k8s:shop:nightly", Source: &engine.Source{Namespace: "shop", Name: "o4", UID: "x4"}},
	}
	type seen struct {
		status  engine.Status
		updated time.Time
		events  int
	}
	before := map[string]seen{}
	for _, p := range bystanders {
		id := b.create(t, p)
		r := b.get(t, id)
		before[id] = seen{r.Status, r.UpdatedAt, len(b.eventTypes(t, id))}
	}
	tick := sqlS.NextTickAt
	for range 3 {
		b.clockTo(t, tick.Add(time.Second))
		got := b.fire(t)
		if len(got) != 2 {
			t.Fatalf("tick %s: %+v", tick, got)
		}
		tick = tick.Add(time.Minute)
	}
	for id, was := range before {
		r := b.get(t, id)
		if r.Status != was.status || !r.UpdatedAt.Equal(was.updated) || len(b.eventTypes(t, id)) != was.events {
			t.Errorf("bystander %s (%s) changed: %s, was %+v", id, r.IdempotencyKey, r.Status, was)
		}
	}
	for _, s := range []engine.Schedule{b.getSchedule(t, "", "nightly"), b.getSchedule(t, "shop", "nightly")} {
		if s.UnfinishedRuns != 1 {
			t.Errorf("%s/%s counts %d unfinished runs, want its own 1", s.Namespace, s.Name, s.UnfinishedRuns)
		}
	}
	_ = k8sS
}

// Hostile and wrong input is refused with a message naming what is wrong,
// and nothing is stored.
func TestScheduleRefusesBadInput(t *testing.T) {
	b := setupSchedules(t)
	deep := strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 70)
	big := `{"blob":"` + strings.Repeat("x", 1<<20) + `"}`
	ok := engine.ScheduleSpec{Name: "fine", Cron: "* * * * *", Type: "sched.fine.v1"}
	with := func(f func(*engine.ScheduleSpec)) engine.ScheduleSpec {
		s := ok
		f(&s)
		return s
	}
	neg := -time.Second
	prioHigh := 1000001
	for _, c := range []struct {
		name string
		spec engine.ScheduleSpec
		want string
	}{
		{"cron of 10,000 characters", with(func(s *engine.ScheduleSpec) { s.Cron = strings.Repeat("*", 10000) }),
			"cron expression is 10000 characters; at most 1024 are allowed"},
		{"garbage cron", with(func(s *engine.ScheduleSpec) { s.Cron = "\x01\x7f\u2603 ); drop table x; --" }), "5 fields"},
		{"cron out of range", with(func(s *engine.ScheduleSpec) { s.Cron = "61 * * * *" }), "minute field 61 is out of range 0-59"},
		{"huge step", with(func(s *engine.ScheduleSpec) { s.Cron = "*/4294967296 * * * *" }), "minute field step 4294967296 is out of range 1-60"},
		{"never fires", with(func(s *engine.ScheduleSpec) { s.Cron = "0 0 30 2 *" }), "never fires"},
		{"NUL in cron", with(func(s *engine.ScheduleSpec) { s.Cron = "* * * * *\x00" }), "cron expression must be UTF-8 text without NUL"},
		{"zone path", with(func(s *engine.ScheduleSpec) { s.TimeZone = "../../etc/passwd" }), "unknown time zone ../../etc/passwd"},
		{"zone unknown", with(func(s *engine.ScheduleSpec) { s.TimeZone = "Mars/Base" }), "unknown time zone Mars/Base"},
		{"zone as a POSIX rule", with(func(s *engine.ScheduleSpec) { s.TimeZone = "FOO3" }), "unknown time zone FOO3"},
		{"zone abbreviation", with(func(s *engine.ScheduleSpec) { s.TimeZone = "PST" }), "unknown time zone PST"},
		{"zone long", with(func(s *engine.ScheduleSpec) { s.TimeZone = strings.Repeat("Z", 10000) }), "unknown time zone ZZZZ"},
		{"payload too deep", with(func(s *engine.ScheduleSpec) { s.Payload = json.RawMessage(deep) }), "nests deeper than 64 levels"},
		{"payload too big", with(func(s *engine.ScheduleSpec) { s.Payload = json.RawMessage(big) }), "the limit is 1048576 (workflow_settings.max_payload_bytes)"},
		{"payload not an object", with(func(s *engine.ScheduleSpec) { s.Payload = json.RawMessage(`[1]`) }), "payload must be a JSON object"},
		{"payload not JSON", with(func(s *engine.ScheduleSpec) { s.Payload = json.RawMessage(`{`) }), "payload is not valid JSON"},
		{"bad type", with(func(s *engine.ScheduleSpec) { s.Type = "Not A Type" }), "a type is lowercase dot-separated words"},
		{"bad name", with(func(s *engine.ScheduleSpec) { s.Name = "../x" }), "schedule name '../x'"},
		{"long name", with(func(s *engine.ScheduleSpec) { s.Name = strings.Repeat("a", 254) }), "at most 253 characters"},
		{"empty name", with(func(s *engine.ScheduleSpec) { s.Name = "" }), "schedule name ''"},
		{"NUL in name", with(func(s *engine.ScheduleSpec) { s.Name = "a\x00b" }), "name must be UTF-8 text without NUL"},
		{"namespace without uid", with(func(s *engine.ScheduleSpec) { s.Namespace = "shop" }), "needs the object's UID"},
		{"uid without namespace", with(func(s *engine.ScheduleSpec) { s.UID = "u" }), "source UID is given without a source namespace"},
		{"bad namespace", with(func(s *engine.ScheduleSpec) { s.Namespace, s.UID = "Shop_1", "u" }), "is not a Kubernetes namespace name"},
		{"priority", with(func(s *engine.ScheduleSpec) { s.Priority = &prioHigh }), "priority must be between 0 and 1000000"},
		{"attempts", with(func(s *engine.ScheduleSpec) { s.MaxAttempts = 1001 }), "max attempts must be between 1 and 1000"},
		{"policy", with(func(s *engine.ScheduleSpec) { s.ConcurrencyPolicy = "Sometimes" }), "concurrency policy must be Allow, Forbid or Replace"},
		{"starting deadline", with(func(s *engine.ScheduleSpec) { s.StartingDeadline = &neg }), "starting deadline seconds must be at least 0"},
		{"deadline", with(func(s *engine.ScheduleSpec) { s.Deadline = -time.Second }), "deadline must not be negative"},
		{"deadline too long", with(func(s *engine.ScheduleSpec) { s.Deadline = 200 * 365 * 24 * time.Hour }), "deadline must be positive and at most 100 years"},
	} {
		_, err := b.eng.PutSchedule(b.ctx, c.spec)
		if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", c.name, err, c.want)
		}
	}
	var n int
	if err := b.pool.QueryRow(b.ctx, "select count(*) from workflow.workflow_schedule").Scan(&n); err != nil || n != 0 {
		t.Errorf("%d schedules stored (%v), want none", n, err)
	}

	// Plain SQL meets the same rules: the table's checks and its trigger.
	for _, c := range []struct{ sql, want string }{
		{`insert into workflow.workflow_schedule (name, cron, type, next_tick_at) values ('x', '61 * * * *', 'a.v1', now())`,
			"schedule x: minute field 61 is out of range 0-59"},
		{`insert into workflow.workflow_schedule (name, cron, type, next_tick_at) values ('x', '* * * * *', 'a.v1', 'infinity')`,
			"workflow_schedule_times_finite"},
		{`insert into workflow.workflow_schedule (name, cron, type, next_tick_at) values ('X', '* * * * *', 'a.v1', now())`,
			"workflow_schedule_name_format"},
		{`insert into workflow.workflow_schedule (name, cron, time_zone, type, next_tick_at) values ('x', '* * * * *', 'Mars/Base', 'a.v1', now())`,
			"unknown time zone Mars/Base"},
		{`insert into workflow.workflow_schedule (name, cron, type, payload, next_tick_at) values ('x', '* * * * *', 'a.v1', '` + deep + `', now())`,
			"nests deeper than 64 levels"},
		{`insert into workflow.workflow_schedule (name, cron, type, concurrency_policy, next_tick_at) values ('x', '* * * * *', 'a.v1', 'Never', now())`,
			"workflow_schedule_concurrency_policy_valid"},
	} {
		if _, err := b.pool.Exec(b.ctx, c.sql); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.80s: %v, want %q", c.sql, err, c.want)
		}
	}

	// A limit lowered after the schedule was written: the tick fails (the
	// error is kept) and the other schedules fire.
	b.putSchedule(t, engine.ScheduleSpec{Name: "large", Cron: "* * * * *", Type: "sched.large.v1",
		Payload: json.RawMessage(`{"blob":"` + strings.Repeat("x", 4000) + `"}`)})
	fine := b.putSchedule(t, ok)
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_settings set max_payload_bytes = 1024"); err != nil {
		t.Fatal(err)
	}
	b.clockTo(t, fine.NextTickAt.Add(time.Second))
	got := b.fire(t)
	var kinds []string
	for _, f := range got {
		kinds = append(kinds, string(f.Outcome))
	}
	if strings.Join(kinds, ",") != "failed,fired" && strings.Join(kinds, ",") != "fired,failed" {
		t.Errorf("with a lowered limit: %+v", got)
	}
	large := b.getSchedule(t, "", "large")
	if large.LastOutcome != engine.FiringFailed || !strings.Contains(large.LastError, "workflow_settings.max_payload_bytes") ||
		!large.NextTickAt.After(*large.LastTickAt) {
		t.Errorf("the failed schedule: %+v", large)
	}
}

// Producers write their own schedules made with SQL, not another user's
// and not the operator's mirrored ones.
func TestScheduleWriters(t *testing.T) {
	b := setupRoles(t)
	if _, err := b.pool.Exec(b.ctx, `grant execute on function
		workflow.put_schedule(text, text, text, jsonb, text, integer, integer, interval, text, integer, boolean, text, text,
			interval, interval, text),
		workflow.delete_schedule(text, text), workflow.list_schedules(text, text, text[])
		to workflow_producer`); err != nil {
		t.Fatal(err)
	}
	alice := b.loginAs(t, "workflow_producer")
	bob := b.loginAs(t, "workflow_producer")
	mine := engine.ScheduleSpec{Name: "alices", Cron: "@daily", Type: "sched.alice.v1"}
	s, err := alice.eng.PutSchedule(b.ctx, mine)
	if err != nil {
		t.Fatal(err)
	}
	if s.CreatedBy != alice.name {
		t.Errorf("created by %q, want %q", s.CreatedBy, alice.name)
	}
	// (the refusal does not name the other user)
	if _, err := bob.eng.PutSchedule(b.ctx, mine); sqlState(err) != "SW002" ||
		!strings.Contains(err.Error(), "another database user of namespace default created it") || strings.Contains(err.Error(), alice.name) {
		t.Errorf("bob changes alice's schedule: %v", err)
	}
	if _, err := bob.eng.DeleteSchedule(b.ctx, "", "alices"); sqlState(err) != "SW002" {
		t.Errorf("bob deletes alice's schedule: %v", err)
	}
	mirrored := engine.ScheduleSpec{Namespace: "shop", UID: "u", Name: "nightly", Cron: "@daily", Type: "sched.alice.v1"}
	if _, err := alice.eng.PutSchedule(b.ctx, mirrored); sqlState(err) != "SW002" {
		t.Errorf("a producer writes a mirrored schedule: %v", err)
	}
	if _, err := b.eng.PutSchedule(b.ctx, mirrored); err != nil {
		t.Errorf("the owner writes a mirrored schedule: %v", err)
	}
	if _, err := alice.eng.DeleteSchedule(b.ctx, "shop", "nightly"); sqlState(err) != "SW002" {
		t.Errorf("a producer deletes a mirrored schedule: %v", err)
	}
	if _, err := alice.eng.FireDueSchedules(b.ctx, 10); sqlState(err) != "42501" {
		t.Errorf("a producer fires schedules: %v", err)
	}
	// A producer lists the schedules of its namespaces (default: alice's),
	// not the mirrored one of namespace shop; the owner lists both.
	if list, err := bob.eng.ListSchedules(b.ctx, engine.ScheduleFilter{}); err != nil || len(list) != 1 || list[0].Name != "alices" {
		t.Errorf("list as a producer of default: %+v %v", list, err)
	}
	if list, err := b.eng.ListSchedules(b.ctx, engine.ScheduleFilter{}); err != nil || len(list) != 2 {
		t.Errorf("list as the owner: %d %v", len(list), err)
	}
	if ok, err := alice.eng.DeleteSchedule(b.ctx, "", "alices"); err != nil || !ok {
		t.Errorf("alice deletes her schedule: %v %v", ok, err)
	}
}

// Daylight saving, fired as the clock moves ten minutes at a time across
// the next transitions of a zone west and one east of UTC: a daily 02:30
// fires once on the day the clocks spring forward (when the gap ends) and
// once on the day they fall back; an hourly job fires once for each local
// hour, 01:00 once on the day 01:00 comes twice.
func TestScheduleDaylightSaving(t *testing.T) {
	for _, c := range []struct {
		zone   string
		spring bool
	}{{"America/New_York", true}, {"America/New_York", false}, {"Europe/Berlin", true}, {"Europe/Berlin", false}} {
		name := c.zone + map[bool]string{true: " spring forward", false: " fall back"}[c.spring]
		t.Run(name, func(t *testing.T) {
			b := setupSchedules(t)
			loc, err := time.LoadLocation(c.zone)
			if err != nil {
				t.Fatal(err)
			}
			// The instant of the zone's next transition of this kind.
			var shift time.Time
			if err := b.pool.QueryRow(b.ctx, `select t + interval '1 hour'
				from generate_series(date_trunc('hour', workflow.now()), workflow.now() + interval '400 days', interval '1 hour') t
				where (((t + interval '1 hour') at time zone $1) - (t at time zone $1) > interval '1 hour') = $2
				  and ((t + interval '1 hour') at time zone $1) - (t at time zone $1) <> interval '1 hour'
				order by t limit 1`, c.zone, c.spring).Scan(&shift); err != nil {
				t.Fatal(err)
			}
			b.clockTo(t, shift.Add(-30*time.Hour))
			daily := b.putSchedule(t, engine.ScheduleSpec{Name: "daily", Cron: "30 2 * * *", TimeZone: c.zone, Type: "sched.dst.v1"})
			early := b.putSchedule(t, engine.ScheduleSpec{Name: "early", Cron: "30 1 * * *", TimeZone: c.zone, Type: "sched.dst.v1"})
			hourly := b.putSchedule(t, engine.ScheduleSpec{Name: "hourly", Cron: "0 * * * *", TimeZone: c.zone, Type: "sched.dst.v1"})
			ticks := map[string][]time.Time{}
			for at := shift.Add(-30 * time.Hour); at.Before(shift.Add(30 * time.Hour)); at = at.Add(10 * time.Minute) {
				b.clockTo(t, at)
				for _, f := range b.fire(t) {
					if f.Outcome != engine.FiringFired {
						t.Errorf("%+v, want only fired", f)
					}
					ticks[f.ScheduleID] = append(ticks[f.ScheduleID], f.Tick)
				}
			}
			day := shift.In(loc).Format("2006-01-02")
			onDay := func(id string) (out []string) {
				for _, tk := range ticks[id] {
					if l := tk.In(loc); l.Format("2006-01-02") == day {
						out = append(out, l.Format("15:04 MST"))
					}
				}
				return out
			}
			local := func(h, m int) time.Time {
				d := shift.In(loc)
				return time.Date(d.Year(), d.Month(), d.Day(), h, m, 0, 0, loc)
			}
			got := onDay(daily.ID)
			if len(got) != 1 {
				t.Fatalf("daily 02:30 on %s: %v, want once", day, got)
			}
			hours := onDay(hourly.ID)
			if c.spring {
				// 02:30 does not exist: the gap ends at the transition.
				if ticks[daily.ID] == nil || !containsTime(ticks[daily.ID], shift) {
					t.Errorf("daily 02:30 on %s fired at %v, want %s (the gap's end)", day, got, shift.In(loc).Format("15:04 MST"))
				}
				if len(hours) != 23 {
					t.Errorf("hourly on %s: %d ticks %v, want 23", day, len(hours), hours)
				}
			} else {
				// The local hour before the transition comes twice: its
				// xx:30 fires at the first one; another hour's as usual.
				twice := shift.Add(-time.Hour).In(loc).Hour()
				for _, job := range []struct {
					s    engine.Schedule
					hour int
				}{{daily, 2}, {early, 1}} {
					want := local(job.hour, 30)
					if job.hour == twice {
						want = shift.Add(-30 * time.Minute)
					}
					if on := onDay(job.s.ID); len(on) != 1 || !containsTime(ticks[job.s.ID], want) {
						t.Errorf("%s on %s: %v, want once at %s", job.s.Cron, day, on, want.In(loc).Format("15:04 MST"))
					}
				}
				if len(hours) != 24 {
					t.Errorf("hourly on %s: %d ticks %v, want 24", day, len(hours), hours)
				}
			}
			seen := map[string]int{}
			for _, h := range hours {
				seen[h[:2]]++
			}
			for h, n := range seen {
				if n != 1 {
					t.Errorf("hourly on %s: local hour %s fired %d times (%v)", day, h, n, hours)
				}
			}
			// Every tick is one run.
			for _, s := range []engine.Schedule{daily, early, hourly} {
				if runs := b.keyedRuns(t, "schedule:"+s.ID+":"); len(runs) != len(ticks[s.ID]) {
					t.Errorf("%s: %d runs for %d ticks", s.Name, len(runs), len(ticks[s.ID]))
				}
			}
		})
	}
}

func containsTime(ts []time.Time, at time.Time) bool {
	for _, t := range ts {
		if t.Equal(at) {
			return true
		}
	}
	return false
}

// The section runs again over itself, with schedules stored, and changes
// nothing.
func TestScheduleFileRunsAgain(t *testing.T) {
	b := setupSchedules(t)
	s := b.putSchedule(t, engine.ScheduleSpec{Name: "kept", Cron: "@hourly", Type: "sched.kept.v1"})
	if again := b.getSchedule(t, "", "kept"); again.ID != s.ID || !again.NextTickAt.Equal(s.NextTickAt) {
		t.Errorf("after running the file again: %+v, was %+v", again, s)
	}
}
