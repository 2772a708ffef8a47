package controller

import (
	"slices"
	"testing"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Which audit events a look turns into Kubernetes Events: never the
// acceptance or heartbeats, a start only when it is the latest thing the
// look found.
func TestWorthTelling(t *testing.T) {
	trail := func(types ...engine.EventType) []engine.Event {
		evs := make([]engine.Event, len(types))
		for i, ty := range types {
			evs[i] = engine.Event{ID: int64(i + 1), Type: ty}
		}
		return evs
	}
	for _, tc := range []struct {
		name string
		evs  []engine.Event
		want []engine.EventType
	}{
		{"accepted only", trail(engine.EventCreated), nil},
		{"running", trail(engine.EventCreated, engine.EventStarted), []engine.EventType{engine.EventStarted}},
		{"running with heartbeats", trail(engine.EventStarted, engine.EventHeartbeat, engine.EventHeartbeat),
			[]engine.EventType{engine.EventStarted}},
		{"started and ended between two looks", trail(engine.EventCreated, engine.EventStarted, engine.EventSucceeded),
			[]engine.EventType{engine.EventSucceeded}},
		{"an older trail's leased", trail(engine.EventCreated, engine.EventLeased, engine.EventStarted),
			[]engine.EventType{engine.EventStarted}},
		{"retried and running again", trail(engine.EventStarted, engine.EventRetried, engine.EventStarted),
			[]engine.EventType{engine.EventRetried, engine.EventStarted}},
		{"parked and woken", trail(engine.EventStarted, engine.EventWaiting, engine.EventSignalReceived, engine.EventWoken),
			[]engine.EventType{engine.EventWaiting, engine.EventSignalReceived, engine.EventWoken}},
		{"cancelled while running", trail(engine.EventStarted, engine.EventHeartbeat, engine.EventCancelled),
			[]engine.EventType{engine.EventCancelled}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []engine.EventType
			for _, ev := range worthTelling(tc.evs) {
				got = append(got, ev.Type)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("worthTelling(%v) = %v, want %v", tc.evs, got, tc.want)
			}
		})
	}
}
