package engine_test

import (
	"testing"
	"encoding/json"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

func TestSmoke(t *testing.T) {
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "demo.echo.v1", Payload: json.RawMessage(`{"a":1}`)})
	c := b.claim(t, "w1", []string{"demo."}, 10)
	if len(c) != 1 || c[0].ID != id { t.Fatalf("claimed %+v", c) }
	hb, err := b.eng.HeartbeatRuns(b.ctx, "w1", []engine.LeaseRef{{ID: id, Attempt: 1}}, 30e9)
	t.Log(hb, err)
	done, err := b.eng.CompleteRuns(b.ctx, "w1", []engine.Completion{{LeaseRef: engine.LeaseRef{ID: id, Attempt: 1}, Result: json.RawMessage(`{"ok":true}`)}})
	t.Log(done, err)
	t.Log(b.get(t, id), b.eventTypes(t, id))
}
