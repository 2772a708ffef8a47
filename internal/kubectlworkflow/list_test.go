package kubectlworkflow

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// listed is the part of a `list -o json|yaml` answer the tests read.
type listed struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Items      []struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Status struct {
			Phase string `json:"phase"`
		} `json:"status"`
	} `json:"items"`
}

func (l listed) names() []string {
	var n []string
	for _, it := range l.Items {
		n = append(n, it.Metadata.Namespace+"/"+it.Metadata.Name+"="+it.Status.Phase)
	}
	return n
}

func TestList(t *testing.T) {
	e := newEnv(t)
	other := e.ns + "-other"
	e.namespace(other)
	e.createRun("resize-9", "content.resize.v1")
	e.setStatus("resize-9", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.Phase, s.Attempts, s.LeasedBy, s.RunID = workflowv1alpha1.PhaseRunning, "1/3", "thumbs-7f9c", "41d2"
	})
	e.createRun("thumb-1", "content.thumbnail.v1")
	e.setStatus("thumb-1", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.Phase, s.Attempts = workflowv1alpha1.PhaseWaiting, "1/3"
		s.WaitingFor = &workflowv1alpha1.WaitingFor{Kind: "signal", Step: "approve", Signal: "approve"}
	})
	elsewhere := &env{cluster: e.cluster, t: t, ctx: e.ctx, ns: other}
	elsewhere.createRun("far-away", "demo.echo.v1")

	r := e.plugin("list", "-n", e.ns)
	wantCode(t, r, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and two rows, got:\n%s", r.stdout)
	}
	for i, want := range []string{
		`^NAME\s+TYPE\s+PHASE\s+ATTEMPT\s+AGE$`,
		`^resize-9\s+content\.resize\.v1\s+Running\s+1/3\s+\d+s$`,
		`^thumb-1\s+content\.thumbnail\.v1\s+Waiting\s+1/3\s+\d+s$`,
	} {
		if !regexp.MustCompile(want).MatchString(lines[i]) {
			t.Errorf("line %d of list: want %s, got %q", i, want, lines[i])
		}
	}

	r = e.plugin("list", "-n", e.ns, "-o", "wide")
	wantCode(t, r, 0)
	if !regexp.MustCompile(`(?m)^NAME\s+TYPE\s+PHASE\s+ATTEMPT\s+AGE\s+PROGRESS\s+WAITING-FOR\s+WORKER\s+RUN-ID$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^resize-9\s+content\.resize\.v1\s+Running\s+1/3\s+\d+s\s+<none>\s+<none>\s+thumbs-7f9c\s+41d2$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^thumb-1\s+.*\s+signal:approve\s+<none>\s+<none>$`).MatchString(r.stdout) {
		t.Errorf("list -o wide:\n%s", r.stdout)
	}

	r = e.plugin("list", "--all-namespaces")
	wantCode(t, r, 0)
	if !regexp.MustCompile(`(?m)^NAMESPACE\s+NAME\s+TYPE\s+PHASE\s+ATTEMPT\s+AGE$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^`+other+`\s+far-away\s+demo\.echo\.v1\s+\d+s$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^`+e.ns+`\s+resize-9\s`).MatchString(r.stdout) {
		t.Errorf("list -A:\n%s", r.stdout)
	}

	for _, format := range []string{"json", "yaml"} {
		r = e.plugin("list", "-n", e.ns, "-o", format)
		wantCode(t, r, 0)
		var l listed
		var err error
		if format == "json" {
			err = json.Unmarshal([]byte(r.stdout), &l)
		} else {
			err = yaml.Unmarshal([]byte(r.stdout), &l)
		}
		if err != nil {
			t.Fatalf("list -o %s: %v\n%s", format, err, r.stdout)
		}
		want := []string{e.ns + "/resize-9=Running", e.ns + "/thumb-1=Waiting"}
		if l.APIVersion != "v1" || l.Kind != "List" || !slices.Equal(l.names(), want) || l.Items[0].Kind != "WorkflowRun" {
			t.Errorf("list -o %s: want a v1 List of %v, got %+v", format, want, l)
		}
	}

	r = e.plugin("list", "-n", e.ns, "-o", "name")
	wantCode(t, r, 0)
	if r.stdout != "workflowrun.workflow.simpleworkflow.dev/resize-9\nworkflowrun.workflow.simpleworkflow.dev/thumb-1\n" {
		t.Errorf("list -o name:\n%s", r.stdout)
	}

	r = e.plugin("list", "-n", e.ns, "-o", "table")
	wantCode(t, r, 1)
	wantIn(t, "stderr of -o table", r.stderr, `unable to match a printer suitable for the output format "table", allowed formats are: json,name,wide,yaml`)

	e.namespace(e.ns + "-empty")
	r = e.plugin("list", "-n", e.ns+"-empty")
	wantCode(t, r, 0)
	if r.stdout != "" || r.stderr != "No resources found in "+e.ns+"-empty namespace.\n" {
		t.Errorf("list of an empty namespace: %s", r)
	}
}

// The namespace comes from -n, else from the kubeconfig's context, chosen
// with --context; --kubeconfig wins over KUBECONFIG.
func TestListNamespaceFromKubeconfig(t *testing.T) {
	e := newEnv(t)
	other := e.ns + "-ctx"
	e.namespace(other)
	e.createRun("mine", "demo.echo.v1")
	(&env{cluster: e.cluster, t: t, ctx: e.ctx, ns: other}).createRun("theirs", "demo.echo.v1")
	kc := e.kubeconfigIn(e.ns, other)

	only := func(r result, name string) {
		t.Helper()
		wantCode(t, r, 0)
		if got := strings.TrimSpace(r.stdout); got != "workflowrun.workflow.simpleworkflow.dev/"+name {
			t.Errorf("want only %s, got %s", name, r)
		}
	}
	only(e.pluginWith([]string{"KUBECONFIG=" + kc}, "list", "-o", "name"), "mine")
	only(e.pluginWith([]string{"KUBECONFIG=" + kc}, "list", "-o", "name", "--context", "other"), "theirs")
	only(e.pluginWith([]string{"KUBECONFIG=" + kc}, "list", "-o", "name", "--context", "other", "-n", e.ns), "mine")
	only(e.pluginWith([]string{"KUBECONFIG=" + e.cp.Kubeconfig}, "list", "-o", "name", "--kubeconfig", kc), "mine")
	// The administrator's kubeconfig has no namespace: "default" it is.
	r := e.plugin("list")
	wantCode(t, r, 0)
	wantIn(t, "stderr of list in default", r.stderr, "No resources found in default namespace.")
}
