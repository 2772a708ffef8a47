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

// Counting the queue only up to countCap changes no decision: for every
// policy and queue, the desired count from the bounded counts is the one
// from the exact counts.
func TestCountCapKeepsDecisions(t *testing.T) {
	policies := []poolPolicy{
		{Max: 5, RunsPerReplica: 10, ActivationRuns: 1},
		{Min: 2, Max: 1000, RunsPerReplica: 1, ActivationRuns: 1},
		{Max: 1, RunsPerReplica: 1, ActivationRuns: 50}, // activation above max × runs
		{Max: 1000, RunsPerReplica: 1 << 30, ActivationRuns: 1},
	}
	queues := []int64{0, 1, 2, 9, 10, 11, 49, 50, 51, 999, 1000, 1001, 5000, 1 << 40}
	for _, p := range policies {
		c := p.countCap()
		if c < int64(p.Max)*int64(p.RunsPerReplica) || c < int64(p.ActivationRuns) {
			t.Fatalf("%+v: cap %d is below max × runs or the activation threshold", p, c)
		}
		for _, current := range []int32{0, 1, p.Max} {
			for _, r := range queues {
				for _, l := range queues {
					exact := p.desiredReplicas(current, r, l)
					bounded := p.desiredReplicas(current, min(r, c), min(l, c))
					if exact != bounded {
						t.Errorf("%+v current %d: %d runnable, %d leased: %d replicas exactly, %d counted up to %d",
							p, current, r, l, exact, bounded, c)
					}
				}
			}
		}
	}
}
