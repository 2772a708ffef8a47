package controller

import (
	"testing"
	"time"
)

func TestDesiredReplicas(t *testing.T) {
	p := poolPolicy{Min: 0, Max: 5, RunsPerReplica: 10, ActivationRuns: 1}
	cases := []struct {
		current          int32
		runnable, leased int64
		want             int32
	}{
		{0, 0, 0, 0},
		{0, 1, 0, 1},
		{0, 27, 0, 3},
		{3, 0, 30, 3},
		{2, 200, 0, 5}, // capped at max
		{4, 0, 0, 0},
	}
	for _, c := range cases {
		if got := p.desiredReplicas(c.current, c.runnable, c.leased); got != c.want {
			t.Errorf("desired(current=%d, runnable=%d, leased=%d) = %d, want %d", c.current, c.runnable, c.leased, got, c.want)
		}
	}
	floor := poolPolicy{Min: 2, Max: 5, RunsPerReplica: 10, ActivationRuns: 1}
	if got := floor.desiredReplicas(2, 0, 0); got != 2 {
		t.Errorf("floor: %d, want 2", got)
	}
	act := poolPolicy{Min: 0, Max: 5, RunsPerReplica: 10, ActivationRuns: 5}
	if got := act.desiredReplicas(0, 4, 0); got != 0 {
		t.Errorf("below activation: %d, want 0", got)
	}
	if got := act.desiredReplicas(0, 5, 0); got != 1 {
		t.Errorf("at activation: %d, want 1", got)
	}
	if got := act.desiredReplicas(1, 2, 0); got != 1 {
		t.Errorf("an active pool keeps working below activation: %d, want 1", got)
	}
}

func TestDecideScalesUpAtOnceAndDownAfterTheDelay(t *testing.T) {
	p := poolPolicy{ScaleDownDelay: time.Minute}
	var st scaleState
	t0 := time.Unix(1000, 0)
	if got, ok := p.decide(&st, t0, 0, 3); !ok || got != 3 {
		t.Fatalf("scale up: %d %v", got, ok)
	}
	if _, ok := p.decide(&st, t0, 3, 1); ok {
		t.Fatal("scaled down before the delay")
	}
	if _, ok := p.decide(&st, t0.Add(59*time.Second), 3, 0); ok {
		t.Fatal("scaled down before the delay")
	}
	if got, ok := p.decide(&st, t0.Add(61*time.Second), 3, 0); !ok || got != 0 {
		t.Fatalf("scale down after the delay: %d %v", got, ok)
	}
	// A rise in between restarts the delay.
	st = scaleState{}
	p.decide(&st, t0, 3, 1)
	p.decide(&st, t0.Add(30*time.Second), 3, 3)
	if _, ok := p.decide(&st, t0.Add(70*time.Second), 3, 1); ok {
		t.Fatal("the delay was not restarted by a rise")
	}
}
