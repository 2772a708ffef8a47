package kubectlworkflow

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// describer writes the human view of one run (`get NAME`).
type describer struct {
	// defs are the steps' definitions of a DAG run, nil when unknown.
	defs map[string]stepDef
	// noDefs says why defs is nil.
	noDefs string
	// now is the time ages are told from; zero means time.Now().
	now time.Time
}

func (d describer) write(w io.Writer, run *workflowv1alpha1.WorkflowRun) error {
	if d.now.IsZero() {
		d.now = time.Now()
	}
	sections := []func(io.Writer, *workflowv1alpha1.WorkflowRun){d.fields, d.steps, d.children, d.conditions}
	for _, s := range sections {
		t := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		s(t, run)
		if err := t.Flush(); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
	return nil
}

// fields writes "Key:\tvalue" lines, leaving out what is unset.
func (d describer) fields(w io.Writer, run *workflowv1alpha1.WorkflowRun) {
	st := run.Status
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "%s:\t%s\n", k, v)
		}
	}
	line("Name", run.Name)
	line("Namespace", run.Namespace)
	line("Type", run.Spec.Type)
	line("Type namespace", run.Spec.TypeNamespace)
	line("Phase", orNone(string(st.Phase)))
	line("Attempts", st.Attempts)
	line("Run ID", st.RunID)
	line("Created", d.when(&run.CreationTimestamp))
	line("Started", d.when(st.StartedAt))
	line("Finished", d.when(st.FinishedAt))
	line("Next attempt", d.when(st.NextAttemptAt))
	line("Deadline", d.when(st.DeadlineAt))
	line("Worker", st.LeasedBy)
	line("Waiting for", d.waiting(run))
	if st.LastStep != "" {
		line("Last step", fmt.Sprintf("%s (%d done)", st.LastStep, st.StepsDone))
	}
	line("Last error", clip(st.LastError, 300))
	if run.Spec.Cancel {
		line("Cancel", "requested (spec.cancel)")
	}
	if run.Spec.Retries > 0 {
		line("Retries", fmt.Sprintf("%d asked, %d handled", run.Spec.Retries, st.Retries))
	}
	if n := len(run.Spec.Signals); n > 0 {
		names := make([]string, 0, n)
		for _, s := range run.Spec.Signals {
			names = append(names, s.Name)
		}
		line("Signals", fmt.Sprintf("%d of %d handled: %s", st.SignalsSent, n, strings.Join(names, ", ")))
	}
	if st.Result != nil {
		line("Result", clip(string(st.Result.Raw), 300))
	}
}

// when is t in RFC 3339 with how long ago or ahead it is.
func (d describer) when(t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	at := t.UTC().Format(time.RFC3339)
	if dt := d.now.Sub(t.Time); dt < 0 {
		return fmt.Sprintf("%s (in %s)", at, duration.HumanDuration(-dt))
	}
	return fmt.Sprintf("%s (%s ago)", at, duration.HumanDuration(d.now.Sub(t.Time)))
}

// waiting says what a parked run waits for, and how to send an awaited
// signal.
func (d describer) waiting(run *workflowv1alpha1.WorkflowRun) string {
	wf := run.Status.WaitingFor
	if wf == nil {
		return ""
	}
	var s string
	switch wf.Kind {
	case "signal":
		s = fmt.Sprintf("signal %q", wf.Signal)
	case "sleep":
		s = "a durable sleep"
	case "child":
		s = "a child run"
	case "limit":
		s = "its type's flow limits"
	default:
		s = wf.Kind
	}
	if wf.Step != "" {
		s += " at step " + wf.Step
	}
	if wf.Until != nil {
		s += ", until " + d.when(wf.Until)
	}
	if wf.Kind == "signal" && wf.Signal != "" {
		s += fmt.Sprintf(" (send it: kubectl workflow approve %s -n %s)", run.Name, run.Namespace)
	}
	return s
}

// steps writes a DAG run's steps as a tree.
func (d describer) steps(w io.Writer, run *workflowv1alpha1.WorkflowRun) {
	if len(run.Status.DAGSteps) == 0 {
		return
	}
	fmt.Fprintln(w, "Steps:")
	tw := &indented{w: w, prefix: "  "}
	fmt.Fprintln(tw, "STEP\tTYPE\tPHASE\tATTEMPTS\tNOTE")
	newDAGTree(run.Status.DAGSteps, d.defs).write(tw, run)
	if d.defs == nil && d.noDefs != "" {
		fmt.Fprintf(w, "  (dependencies not shown: %s)\n", d.noDefs)
	}
}

// children writes the child runs of a run that is not a DAG (a DAG's
// children are its steps).
func (d describer) children(w io.Writer, run *workflowv1alpha1.WorkflowRun) {
	st := run.Status
	if len(st.Children) == 0 || len(st.DAGSteps) > 0 {
		return
	}
	fmt.Fprintln(w, "Children:")
	tw := &indented{w: w, prefix: "  "}
	fmt.Fprintln(tw, "STEP\tTYPE\tPHASE\tRUN-ID")
	for _, c := range st.Children {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Step, c.Type, c.Phase, c.RunID)
	}
	if more := int(st.ChildrenTotal) - len(st.Children); more > 0 {
		fmt.Fprintf(w, "  (%d more)\n", more)
	}
}

// conditions writes the status conditions as a table.
func (d describer) conditions(w io.Writer, run *workflowv1alpha1.WorkflowRun) {
	if len(run.Status.Conditions) == 0 {
		return
	}
	fmt.Fprintln(w, "Conditions:")
	tw := &indented{w: w, prefix: "  "}
	fmt.Fprintln(tw, "TYPE\tSTATUS\tREASON\tMESSAGE")
	for _, c := range run.Status.Conditions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, clip(c.Message, 200))
	}
}

// indented writes what it is given to w with prefix at the start of each
// line.
type indented struct {
	w       io.Writer
	prefix  string
	midLine bool
}

func (i *indented) Write(p []byte) (int, error) {
	for n := 0; n < len(p); {
		if !i.midLine {
			if _, err := io.WriteString(i.w, i.prefix); err != nil {
				return n, err
			}
		}
		end := bytes.IndexByte(p[n:], '\n') + 1
		if end == 0 {
			end = len(p) - n
		}
		m, err := i.w.Write(p[n : n+end])
		n += m
		if err != nil {
			return n, err
		}
		i.midLine = p[n-1] != '\n'
	}
	return len(p), nil
}
