package engine_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// A schedule's retry policy and concurrency key are stored, listed, given
// to every run it records, and changed or cleared by a put.
func TestScheduleRetryPolicyAndConcurrencyKey(t *testing.T) {
	b := setupSchedules(t)
	spec := engine.ScheduleSpec{
		Namespace: "shop", UID: "uid-1", Name: "billing", Cron: "* * * * *", Type: "sched.bill.v1",
		Payload:        json.RawMessage(`{"a":1}`),
		RetryPolicy:    &engine.RetryPolicy{BaseDelay: 30 * time.Second, MaxDelay: 10 * time.Minute},
		ConcurrencyKey: "customer-7",
	}
	s := b.putSchedule(t, spec)
	if s.RetryPolicy == nil || s.RetryPolicy.BaseDelay != 30*time.Second || s.RetryPolicy.MaxDelay != 10*time.Minute ||
		s.ConcurrencyKey != "customer-7" {
		t.Fatalf("stored %+v, retry %+v", s, s.RetryPolicy)
	}
	b.clockTo(t, s.NextTickAt.Add(time.Second))
	got := b.fire(t)
	if len(got) != 1 || got[0].Outcome != engine.FiringFired {
		t.Fatalf("fired %+v", got)
	}
	run := b.get(t, got[0].RunID)
	if run.RetryPolicy == nil || run.RetryPolicy.BaseDelay != 30*time.Second || run.RetryPolicy.MaxDelay != 10*time.Minute ||
		run.ConcurrencyKey != "customer-7" {
		t.Errorf("run %+v, retry %+v", run, run.RetryPolicy)
	}

	// Cleared: the next run has neither.
	spec.RetryPolicy, spec.ConcurrencyKey = nil, ""
	s = b.putSchedule(t, spec)
	if s.RetryPolicy != nil || s.ConcurrencyKey != "" {
		t.Fatalf("cleared: %+v", s)
	}
	b.clockTo(t, s.NextTickAt.Add(time.Second))
	got = b.fire(t)
	if len(got) != 1 || got[0].Outcome != engine.FiringFired {
		t.Fatalf("fired %+v", got)
	}
	if run := b.get(t, got[0].RunID); run.RetryPolicy != nil || run.ConcurrencyKey != "" {
		t.Errorf("run after clearing: %+v, retry %+v", run, run.RetryPolicy)
	}

	for _, c := range []struct {
		spec engine.ScheduleSpec
		want string
	}{
		{engine.ScheduleSpec{RetryPolicy: &engine.RetryPolicy{BaseDelay: time.Minute, MaxDelay: time.Second}},
			"retry max delay"},
		{engine.ScheduleSpec{RetryPolicy: &engine.RetryPolicy{BaseDelay: -time.Second}}, "retry delays must not be negative"},
		{engine.ScheduleSpec{ConcurrencyKey: strings.Repeat("k", 256)}, "concurrency key"},
		{engine.ScheduleSpec{ConcurrencyKey: "a\x00b"}, "concurrency key"},
	} {
		c.spec.Name, c.spec.Cron, c.spec.Type = "refused", "@daily", "sched.bad.v1"
		_, err := b.eng.PutSchedule(b.ctx, c.spec)
		if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.spec, err, c.want)
		}
	}
}
