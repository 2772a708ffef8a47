package engine_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// A signal's sender, as the caller names it (the console names the user
// the API server verified), is in the run's signal_received event, cut to
// the label's bound and cleaned; none named, none recorded.
func TestSignalRecordsWhoSentIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "signalled.v1"})
	for _, by := range []string{"alice@example.com", "", strings.Repeat("é", 300) + "\x00"} {
		if _, err := b.eng.SendSignal(b.ctx, engine.SignalParams{RunID: id, Name: "approve", By: by}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := b.eng.ListEvents(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		if e.Type != engine.EventType("signal_received") {
			continue
		}
		var d struct {
			By *string `json:"by"`
		}
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.By == nil {
			got = append(got, "<none>")
		} else {
			got = append(got, *d.By)
		}
	}
	if len(got) != 3 || got[0] != "alice@example.com" || got[1] != "<none>" || len(got[2]) > engine.MaxCancelledByBytes ||
		strings.Contains(got[2], "\x00") {
		t.Fatalf("signal_received events' senders: %q", got)
	}
}
