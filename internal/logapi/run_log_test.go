package logapi

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/simple-workflow/simple-workflow/internal/engine"
	logsv1alpha1 "github.com/simple-workflow/simple-workflow/internal/logapi/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

func TestParseQuery(t *testing.T) {
	for raw, want := range map[string]logQuery{
		"":                  {attempt: 0, tail: logsv1alpha1.DefaultTail},
		"attempt=2":         {attempt: 2, tail: logsv1alpha1.DefaultTail},
		"tail=1&attempt=1":  {attempt: 1, tail: 1},
		"tail=10000":        {tail: 10000},
		"other=x&tail=5000": {tail: 5000},
	} {
		q, _ := url.ParseQuery(raw)
		got, err := parseQuery(q)
		if err != nil || got != want {
			t.Errorf("%q: got %+v, %v; want %+v", raw, got, err, want)
		}
	}
	for _, raw := range []string{"attempt=0", "attempt=-1", "attempt=x", "tail=0", "tail=10001", "tail=1.5", "tail="} {
		q, _ := url.ParseQuery(raw)
		if _, err := parseQuery(q); raw == "tail=" {
			if err != nil {
				t.Errorf("%q (empty: the default): %v", raw, err)
			}
		} else if !apierrors.IsBadRequest(err) {
			t.Errorf("%q: want a BadRequest status, got %v", raw, err)
		}
	}
}

// readLog reads the real inbox: the attempts that logged, the newest tail
// lines of the one asked for (seq numbers after the dropped ones), and
// nothing of a run of another namespace.
func TestReadLog(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	eng, err := engine.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	create := func(name string) string {
		res, err := eng.CreateRun(ctx, engine.CreateParams{Type: "logs.v1", MaxAttempts: 2,
			Source: &engine.Source{Namespace: "team-a", Name: name, UID: "uid-" + name}})
		if err != nil {
			t.Fatal(err)
		}
		return res.ID
	}
	logged, quiet := create("logged"), create("quiet")
	claimed, err := eng.ClaimRuns(ctx, engine.ClaimParams{WorkerID: "w1", TypePrefixes: []string{"logs."}, Runtime: "go",
		Limit: 1, LeaseDuration: time.Minute, Namespace: "team-a"})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	if claimed[0].ID != logged {
		logged, quiet = quiet, logged // either: the one claimed logs
	}
	var lines []engine.LogLine
	for i := range 5 {
		lines = append(lines, engine.LogLine{At: time.Now(), Level: engine.LogWarn, Message: fmt.Sprintf("line %d", i)})
	}
	ref := engine.LeaseRef{ID: claimed[0].ID, Token: claimed[0].LeaseToken, Attempt: claimed[0].Attempt}
	if lost, err := eng.AppendRunLogs(ctx, "w1", []engine.AttemptLog{{LeaseRef: ref, Lines: lines, Dropped: 2}}); err != nil || len(lost) > 0 {
		t.Fatalf("append: lost %v, %v", lost, err)
	}

	got, err := readLog(ctx, eng, "team-a", "logged", logged, logQuery{tail: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != "WorkflowRunLog" || got.APIVersion != "logs.simpleworkflow.dev/v1alpha1" || got.RunID != logged ||
		got.Metadata.Namespace != "team-a" || got.Metadata.Name != "logged" {
		t.Errorf("object: %+v", got)
	}
	if len(got.Attempts) != 1 || got.Attempts[0] != (logsv1alpha1.AttemptSummary{Attempt: 1, Lines: 5, Dropped: 2}) {
		t.Errorf("attempts: %+v", got.Attempts)
	}
	if got.Attempt != 1 || got.Omitted != 3 || len(got.Lines) != 2 || got.Lines[0].Message != "line 3" ||
		got.Lines[1].Message != "line 4" || got.Lines[0].Level != "warn" || got.Lines[1].Seq != got.Lines[0].Seq+1 {
		t.Errorf("tail 2: %+v", got)
	}
	got, err = readLog(ctx, eng, "team-a", "logged", logged, logQuery{attempt: 1, tail: 100})
	if err != nil || got.Omitted != 0 || len(got.Lines) != 5 || got.Lines[0].Message != "line 0" {
		t.Errorf("attempt 1, tail 100: %+v, %v", got, err)
	}
	if _, err := readLog(ctx, eng, "team-a", "logged", logged, logQuery{attempt: 2, tail: 100}); !apierrors.IsNotFound(err) {
		t.Errorf("attempt 2 (never ran): want NotFound, got %v", err)
	}
	got, err = readLog(ctx, eng, "team-a", "quiet", quiet, logQuery{tail: 100})
	if err != nil || got.Attempt != 0 || len(got.Attempts) != 0 || len(got.Lines) != 0 {
		t.Errorf("a run that logged nothing: %+v, %v", got, err)
	}
	// The run id of another namespace's run (a status.runID written by
	// someone else than the operator) reads nothing.
	if _, err := readLog(ctx, eng, "team-b", "logged", logged, logQuery{tail: 100}); !apierrors.IsNotFound(err) {
		t.Errorf("another namespace's run: want NotFound, got %v", err)
	}
	if _, err := readLog(ctx, eng, "team-a", "gone", "00000000-0000-4000-8000-000000000000", logQuery{tail: 100}); !apierrors.IsNotFound(err) {
		t.Errorf("a run not in the inbox: want NotFound, got %v", err)
	}
}
