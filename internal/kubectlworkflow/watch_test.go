package kubectlworkflow

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// exitWithin waits for a background plugin's exit code, for at most 30
// seconds.
func exitWithin(t *testing.T, code <-chan int) int {
	t.Helper()
	select {
	case c := <-code:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("the plugin did not exit within 30s")
		return -1
	}
}

func TestWatchSucceeded(t *testing.T) {
	e := newEnv(t)
	e.createRun("order-1", "demo.order.v1")
	e.setStatus("order-1", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.Phase, s.Attempts = workflowv1alpha1.PhaseRunning, "1/3"
	})
	out, errOut, code := e.background("watch", "order-1", "-n", e.ns, "--timeout", "60s")
	// Each change is made once the watch printed the one before, so none
	// is folded into the next.
	step := func(want string, change func(*workflowv1alpha1.WorkflowRunStatus)) {
		t.Helper()
		e.eventually("watch to print "+want, func() bool { return strings.Contains(out.String(), want) })
		if change != nil {
			e.setStatus("order-1", change)
		}
	}
	step("order-1   Running     attempt 1/3\n", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.Phase, s.WaitingFor = workflowv1alpha1.PhaseWaiting, &workflowv1alpha1.WaitingFor{Kind: "signal", Step: "approve", Signal: "approve"}
	})
	step("order-1   Waiting     for signal:approve at step approve\n", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.LastStep = "approve" // no line: neither phase nor detail changed
	})
	e.setStatus("order-1", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.Phase, s.WaitingFor, s.Attempts = workflowv1alpha1.PhaseRunning, nil, "2/3"
	})
	step("order-1   Running     attempt 2/3\n", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.Phase = workflowv1alpha1.PhaseSucceeded
	})
	if c := exitWithin(t, code); c != 0 {
		t.Fatalf("watch of a run that succeeded: exit code %d\n%s\n%s", c, out, errOut)
	}
	want := "order-1   Running     attempt 1/3\n" +
		"order-1   Waiting     for signal:approve at step approve\n" +
		"order-1   Running     attempt 2/3\n" +
		"order-1   Succeeded\n"
	if out.String() != want || errOut.String() != "" {
		t.Errorf("watch printed:\n%s\nwant:\n%s\nstderr: %s", out, want, errOut)
	}

	// A run that already ended is told at once.
	r := e.plugin("watch", "order-1", "-n", e.ns)
	wantCode(t, r, 0)
	if r.stdout != "order-1   Succeeded\n" {
		t.Errorf("watch of a finished run: %s", r)
	}
}

func TestWatchFailedOrCancelled(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name   string
		status func(*workflowv1alpha1.WorkflowRunStatus)
		line   string
		stderr string
	}{
		{"fails", func(s *workflowv1alpha1.WorkflowRunStatus) {
			s.Phase, s.LastError = workflowv1alpha1.PhaseFailed, "planned failure 3 of 3"
		}, "fails   Failed      planned failure 3 of 3\n", "error: workflowrun NS/fails ended Failed: planned failure 3 of 3\n"},
		{"cancelled", func(s *workflowv1alpha1.WorkflowRunStatus) {
			s.Phase = workflowv1alpha1.PhaseCancelled
			s.Conditions = []metav1.Condition{{Type: "Finished", Status: metav1.ConditionTrue, Reason: "Cancelled",
				Message: "cancelled by spec.cancel of WorkflowRun NS/cancelled", LastTransitionTime: metav1.Now()}}
		}, "cancelled   Cancelled\n", "error: workflowrun NS/cancelled ended Cancelled: cancelled by spec.cancel of WorkflowRun NS/cancelled\n"},
	} {
		e.createRun(tc.name, "demo.fail.v1")
		out, errOut, code := e.background("watch", tc.name, "-n", e.ns)
		e.eventually("watch of "+tc.name+" to start", func() bool { return out.String() != "" })
		e.setStatus(tc.name, func(s *workflowv1alpha1.WorkflowRunStatus) {
			tc.status(s)
			for i := range s.Conditions {
				s.Conditions[i].Message = strings.ReplaceAll(s.Conditions[i].Message, "NS", e.ns)
			}
		})
		if c := exitWithin(t, code); c != 1 {
			t.Errorf("watch of %s: exit code %d, want 1\n%s\n%s", tc.name, c, out, errOut)
		}
		if want := tc.name + "   <none>\n" + tc.line; out.String() != want {
			t.Errorf("watch of %s printed:\n%s\nwant:\n%s", tc.name, out, want)
		}
		if want := strings.ReplaceAll(tc.stderr, "NS", e.ns); errOut.String() != want {
			t.Errorf("watch of %s: stderr %q, want %q", tc.name, errOut, want)
		}
	}
}

func TestWatchTimeout(t *testing.T) {
	e := newEnv(t)
	e.createRun("slow", "demo.sleep.v1")
	e.setStatus("slow", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.Phase, s.Attempts = workflowv1alpha1.PhaseRunning, "1/3"
	})
	start := time.Now()
	r := e.plugin("watch", "slow", "-n", e.ns, "--timeout", "2s")
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("watch --timeout 2s took %s", took)
	}
	wantCode(t, r, 2)
	if r.stdout != "slow   Running     attempt 1/3\n" ||
		!regexp.MustCompile(`^error: timed out after 2s waiting for workflowrun \S+/slow to end \(phase Running\)\n$`).MatchString(r.stderr) {
		t.Errorf("watch --timeout: %s", r)
	}
	r = e.plugin("watch", "slow", "-n", e.ns, "--timeout", "-1s")
	wantCode(t, r, 1)
	wantIn(t, "stderr of a negative timeout", r.stderr, "--timeout must not be negative")
}

// A watch started right after `retry` follows the retried run: the Failed
// status it reads first is the failure being retried, not the end.
func TestWatchAfterRetryFollowsTheNewAttempt(t *testing.T) {
	e := newEnv(t)
	e.createRun("again-1", "demo.order.v1")
	e.setStatus("again-1", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.Phase, s.LastError = workflowv1alpha1.PhaseFailed, "the shop answered 503"
	})
	wantCode(t, e.plugin("retry", "again-1", "-n", e.ns), 0)
	out, errOut, code := e.background("watch", "again-1", "-n", e.ns, "--timeout", "60s")
	e.eventually("watch to print the failed state", func() bool { return strings.Contains(out.String(), "Failed") })
	e.setStatus("again-1", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.Phase, s.Retries, s.Attempts, s.LastError = workflowv1alpha1.PhaseRunning, 1, "1/3", ""
	})
	e.eventually("watch to print the new attempt", func() bool { return strings.Contains(out.String(), "Running") })
	e.setStatus("again-1", func(s *workflowv1alpha1.WorkflowRunStatus) { s.Phase = workflowv1alpha1.PhaseSucceeded })
	if c := exitWithin(t, code); c != 0 {
		t.Fatalf("watch after retry: exit code %d\n%s\n%s", c, out, errOut)
	}
}

// Ctrl-C ends a watch with 130, as a shell reports a process SIGINT
// ended: not 1, which says the run failed.
func TestWatchInterrupted(t *testing.T) {
	e := newEnv(t)
	e.createRun("long", "demo.sleep.v1")
	e.setStatus("long", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.Phase, s.Attempts = workflowv1alpha1.PhaseRunning, "1/3"
	})
	out, errOut, code, proc := e.backgroundProcess("watch", "long", "-n", e.ns)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "Running") {
		if time.Now().After(deadline) {
			t.Fatalf("watch printed nothing: %q %q", out.String(), errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := proc.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != ExitInterrupted || strings.Contains(errOut.String(), "error:") {
			t.Fatalf("watch after Ctrl-C: exit %d, stderr %q", c, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("watch did not end on Ctrl-C")
	}
}

// get -o wide is the run's row of list -o wide.
func TestGetWide(t *testing.T) {
	e := newEnv(t)
	e.createRun("order-9", "demo.order.v1")
	e.setStatus("order-9", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.Phase, s.Attempts, s.RunID = workflowv1alpha1.PhaseRunning, "1/3", "717e0000-0000-4000-8000-000000000009"
	})
	r := e.plugin("get", "order-9", "-n", e.ns, "-o", "wide")
	wantCode(t, r, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[0], "RUN-ID") ||
		!strings.HasPrefix(lines[1], "order-9") || !strings.Contains(lines[1], "717e0000-0000-4000-8000-000000000009") {
		t.Fatalf("get -o wide:\n%s", r.stdout)
	}
}
