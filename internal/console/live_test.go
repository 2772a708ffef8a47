package console_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// stream opens a page's event stream and returns a channel that receives
// each event's name.
func (e *env) stream(t *testing.T, query string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/live"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("live: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan string, 16)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				select { // a test reads a few; never block the reader on the rest
				case out <- name:
				default:
				}
			}
		}
	}()
	return out
}

func expectEvent(t *testing.T, ch <-chan string, within time.Duration, why string) {
	t.Helper()
	select {
	case name := <-ch:
		if name != "changed" {
			t.Fatalf("%s: event %q", why, name)
		}
	case <-time.After(within):
		t.Fatalf("%s: no event within %s", why, within)
	}
}

// waitFor polls cond until it holds, failing the test after timeout (as
// the other packages' tests of the same name do).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func expectQuiet(t *testing.T, ch <-chan string, d time.Duration, why string) {
	t.Helper()
	select {
	case name := <-ch:
		t.Fatalf("%s: unexpected event %q", why, name)
	case <-time.After(d):
	}
}

var liveQuery = regexp.MustCompile(`data-live="([^"]*)"`)

func TestRunPageIsToldWhenTheRunChanges(t *testing.T) {
	e := setup(t)
	id := e.create(t, engine.CreateParams{Type: "live.job.v1"}) // no Kubernetes object, and claims notify nothing: the periodic look tells
	_, body := e.get(t, "/runs/"+id)
	m := liveQuery.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("the run page has no live stream:\n%s", body)
	}
	events := e.stream(t, strings.ReplaceAll(m[1], "&amp;", "&"))
	// Nothing changed since the page was rendered.
	expectQuiet(t, events, time.Second, "an unchanged run")

	c := e.claim(t, "live.", 1)
	expectEvent(t, events, 3*time.Second, "the run was claimed")
	e.complete(t, c[0], `{"done": true}`)
	expectEvent(t, events, 3*time.Second, "the run succeeded")
	_, body = e.get(t, "/runs/"+id)
	mustContain(t, "the run page after the run finished", body, `id="status">succeeded<`, `&#34;done&#34;: true`)

	// Another run's change is not this page's.
	other := e.create(t, engine.CreateParams{Type: "live.job.v1"})
	c = e.claim(t, "live.", 1)
	if len(c) != 1 || c[0].ID != other {
		t.Fatalf("claimed %v, want %s", c, other)
	}
	expectQuiet(t, events, time.Second, "another run changed")

	// A page rendered before a change it missed is told at once.
	stale := e.stream(t, "?run="+id+"&v=stale")
	expectEvent(t, stale, 3*time.Second, "a page older than the run")
}

func TestListPagesAreToldWhenTheInboxChanges(t *testing.T) {
	e := setup(t)
	events := e.stream(t, "?")
	expectQuiet(t, events, 1500*time.Millisecond, "a list page that just opened, with nothing changed")
	e.create(t, engine.CreateParams{Type: "live.list.v1"})
	// At most one update per two seconds for the pages of many runs.
	expectEvent(t, events, 4*time.Second, "a run was created")
	expectQuiet(t, events, 2500*time.Millisecond, "nothing changed after the update")
}

func TestRunPageIsToldOfJournalEntriesAndSignals(t *testing.T) {
	e := setup(t)
	id := e.create(t, engine.CreateParams{Type: "live.signal.v1"})
	_, body := e.get(t, "/runs/"+id)
	m := liveQuery.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no live stream")
	}
	events := e.stream(t, strings.ReplaceAll(m[1], "&amp;", "&"))
	expectQuiet(t, events, time.Second, "an unchanged run")
	// A signal notifies nothing; the console's periodic look finds it.
	if _, err := e.eng.SendSignal(e.ctx, engine.SignalParams{RunID: id, Name: "approve"}); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, events, 5*time.Second, "a signal was sent")
	_, body = e.get(t, "/runs/"+id)
	mustContain(t, "the run page after a signal", body, `<table id="signals">`, `<td>approve</td>`)
}

// An unauthenticated console knows no viewers: it bounds the streams of
// each client address instead.
func TestOneClientCannotHoldEveryStream(t *testing.T) {
	e := setup(t)
	for i := range 16 {
		e.stream(t, fmt.Sprintf("?n=%d", i))
	}
	resp, err := http.Get(e.base + "/live?")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a 17th stream from one address: %d, want 429", resp.StatusCode)
	}
}

// Claims and completions notify nothing (they would cost every worker's
// transaction a notification): the pages of many runs follow the inbox's
// version, and are told once per change, not again while nothing moves.
func TestListPagesAreToldWhenRunsFinish(t *testing.T) {
	e := setup(t)
	// The page opens once the console has heard of the run's creation: a
	// notification still on its way would be news to it.
	waitFor(t, 10*time.Second, "the console listens for the inbox's notifications", e.console.Listening)
	before := time.Now()
	id := e.create(t, engine.CreateParams{Type: "live.finish.v1"})
	waitFor(t, 10*time.Second, "the console heard of the run's creation", func() bool { return e.console.HeardSince(before) })
	events := e.stream(t, "?")
	expectQuiet(t, events, 2500*time.Millisecond, "a list page that just opened, with nothing changed")
	c := e.claim(t, "live.finish.", 1)
	if len(c) != 1 || c[0].ID != id {
		t.Fatalf("claimed %v, want %s", c, id)
	}
	expectEvent(t, events, 5*time.Second, "a run was claimed")
	expectQuiet(t, events, 2500*time.Millisecond, "nothing changed after the claim was shown")
	e.complete(t, c[0], `{}`)
	expectEvent(t, events, 5*time.Second, "a run succeeded")
	expectQuiet(t, events, 2500*time.Millisecond, "nothing changed after the completion was shown")
}

// openStream opens a list page's event stream as the holder of token and
// returns whether it opened (200, an event stream) and the status; an open
// stream stays open until closeStream is called or the test ends.
func (a *authEnv) openStream(t *testing.T, token string) (opened bool, status int, closeStream func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(a.ctx)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/live?", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		cancel()
		return false, resp.StatusCode, func() {}
	}
	return true, resp.StatusCode, func() {
		cancel()
		resp.Body.Close()
	}
}

// Streams are counted per viewer, not per address: behind one ingress (one
// client address for everyone) a viewer who holds all the streams allowed
// them keeps no other viewer from theirs, and gets a slot back when one of
// theirs closes.
func TestOneViewerCannotHoldAnotherViewersStreams(t *testing.T) {
	t.Parallel()
	a := setupAuth(t, time.Minute)
	a.namespace(t, "team-live")
	viewerA := a.serviceAccount(t, "team-live", "viewer-a")
	viewerB := a.serviceAccount(t, "team-live", "viewer-b")
	const perViewer = 16
	var closeFirst func()
	for i := range perViewer {
		opened, status, closeIt := a.openStream(t, viewerA)
		if !opened {
			t.Fatalf("viewer A's stream %d of %d: %d", i+1, perViewer, status)
		}
		if i == 0 {
			closeFirst = closeIt
		}
	}
	if opened, status, _ := a.openStream(t, viewerA); opened || status != http.StatusTooManyRequests {
		t.Fatalf("viewer A's stream %d: %d, want 429", perViewer+1, status)
	}
	// Viewer B, from the same address (127.0.0.1), is not viewer A.
	if opened, status, _ := a.openStream(t, viewerB); !opened {
		t.Fatalf("viewer B's first stream, from viewer A's address: %d, want 200 and an event stream", status)
	}
	// Closing one of viewer A's streams gives viewer A a slot back.
	closeFirst()
	waitFor(t, 10*time.Second, "viewer A may open a stream once one of theirs closed", func() bool {
		opened, _, _ := a.openStream(t, viewerA)
		return opened
	})
}
