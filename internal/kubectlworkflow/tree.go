package kubectlworkflow

import (
	"fmt"
	"io"
	"strings"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// stepDef is what a workflow's definition says of one step that the run's
// status does not: the steps it depends on, and whether it is the final
// step.
type stepDef struct {
	dependsOn []string
	final     bool
}

// dagTree is the steps of a DAG run arranged as a tree: each step under
// the dependency listed last in the definition's order (so a step shows
// after everything it waits for), a step without dependencies under the
// run. A step's other dependencies are named beside it.
type dagTree struct {
	steps    []workflowv1alpha1.DAGStepStatus
	defs     map[string]stepDef // nil: dependencies unknown, every step under the run
	children map[string][]int   // by parent name; "" is the run
}

// newDAGTree arranges steps by defs (nil when the definition is unknown).
func newDAGTree(steps []workflowv1alpha1.DAGStepStatus, defs map[string]stepDef) *dagTree {
	t := &dagTree{steps: steps, defs: defs, children: map[string][]int{}}
	pos := make(map[string]int, len(steps))
	for i, s := range steps {
		pos[s.Name] = i
	}
	parent := make([]string, len(steps))
	for i, s := range steps {
		best := -1
		for _, d := range defs[s.Name].dependsOn {
			if j, ok := pos[d]; ok && j != i && j > best {
				best = j
			}
		}
		if best >= 0 {
			parent[i] = steps[best].Name
		}
	}
	// A step whose chain of parents never reaches the run (a cycle, which
	// the database refuses, but the status is data) goes under the run.
	for i := range steps {
		seen := map[int]bool{}
		for j := i; parent[j] != ""; j = pos[parent[j]] {
			if seen[j] {
				parent[i] = ""
				break
			}
			seen[j] = true
		}
	}
	for i := range steps {
		t.children[parent[i]] = append(t.children[parent[i]], i)
	}
	return t
}

// write writes the tree as table rows (STEP, TYPE, PHASE, ATTEMPTS, NOTE)
// with the run as the root.
func (t *dagTree) write(w io.Writer, run *workflowv1alpha1.WorkflowRun) {
	note := ""
	if run.Status.Progress != "" {
		note = run.Status.Progress + " succeeded"
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", run.Name, run.Spec.Type, run.Status.Phase, run.Status.Attempts, note)
	t.writeChildren(w, "", "")
}

func (t *dagTree) writeChildren(w io.Writer, parent, prefix string) {
	kids := t.children[parent]
	for n, i := range kids {
		s := t.steps[i]
		branch, indent := "├── ", "│   "
		if n == len(kids)-1 {
			branch, indent = "└── ", "    "
		}
		fmt.Fprintf(w, "%s%s%s\t%s\t%s\t%s\t%s\n", prefix, branch, s.Name, s.Type, s.Phase, s.Attempts, t.note(s, parent))
		t.writeChildren(w, s.Name, prefix+indent)
	}
}

// note is what the tree says beside a step: final, its dependencies besides
// its parent, its fan-out's progress and its error.
func (t *dagTree) note(s workflowv1alpha1.DAGStepStatus, parent string) string {
	var parts []string
	def := t.defs[s.Name]
	if def.final {
		parts = append(parts, "final")
	}
	var also []string
	for _, d := range def.dependsOn {
		if d != parent {
			also = append(also, d)
		}
	}
	if len(also) > 0 {
		parts = append(parts, "also after "+strings.Join(also, ", "))
	}
	if s.Elements != "" {
		parts = append(parts, "elements "+s.Elements)
	}
	if s.Error != "" {
		parts = append(parts, "error: "+clip(s.Error, 80))
	}
	return strings.Join(parts, "; ")
}
