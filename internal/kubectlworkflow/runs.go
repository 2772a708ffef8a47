package kubectlworkflow

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// resourceName is the WorkflowRun resource as kubectl names it in output
// (-o name) and messages.
const resourceName = "workflowrun.workflow.simpleworkflow.dev"

func runsResource() schema.GroupVersionResource {
	return workflowv1alpha1.GroupVersion.WithResource("workflowruns")
}

func registriesResource() schema.GroupVersionResource {
	return workflowv1alpha1.GroupVersion.WithResource("workflowregistries")
}

// runs reads and patches the WorkflowRuns of one namespace, or of all
// namespaces when ns is "".
type runs struct {
	dc dynamic.Interface
	ns string
}

func (r *runs) client() dynamic.ResourceInterface {
	if r.ns == "" {
		return r.dc.Resource(runsResource())
	}
	return r.dc.Resource(runsResource()).Namespace(r.ns)
}

// get reads the run name as the API server returns it and as the typed
// WorkflowRun.
func (r *runs) get(ctx context.Context, name string) (*unstructured.Unstructured, *workflowv1alpha1.WorkflowRun, error) {
	u, err := r.client().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("read workflowrun %s/%s: %w", r.ns, name, err)
	}
	run, err := toRun(u)
	if err != nil {
		return nil, nil, err
	}
	return u, run, nil
}

// list reads the runs matching the label selector (everything when empty).
func (r *runs) list(ctx context.Context, selector string) (*unstructured.UnstructuredList, error) {
	l, err := r.client().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		where := "namespace " + r.ns
		if r.ns == "" {
			where = "all namespaces"
		}
		return nil, fmt.Errorf("list workflowruns in %s: %w", where, err)
	}
	return l, nil
}

// listWatchOne lists and watches the run name only (a field selector on
// its name), for an informer.
func (r *runs) listWatchOne(name string) *cache.ListWatch {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return r.client().List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return r.client().Watch(ctx, opts)
		},
	}
}

// toRun converts an object read from the API server to a WorkflowRun.
func toRun(u *unstructured.Unstructured) (*workflowv1alpha1.WorkflowRun, error) {
	var run workflowv1alpha1.WorkflowRun
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &run); err != nil {
		return nil, fmt.Errorf("decode workflowrun %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return &run, nil
}

// patchOp is one operation of a JSON patch (RFC 6902).
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// conflictBackoff bounds the re-reads after a conflict: a run whose status
// the operator writes while we patch is read again up to ten times, over
// about ten seconds.
func conflictBackoff() wait.Backoff {
	return wait.Backoff{Steps: 10, Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.1, Cap: 2 * time.Second}
}

// patch reads run name, asks change for the operations to apply to it, and
// applies them as a JSON patch that also sets metadata.resourceVersion to
// the version read: the API server refuses it with a conflict if the run
// changed since, and patch then reads it again and asks change again. A
// change that returns no operations leaves the run alone (patch returns
// false); an error from change is returned as it is.
func (r *runs) patch(ctx context.Context, name string,
	change func(u *unstructured.Unstructured, run *workflowv1alpha1.WorkflowRun) ([]patchOp, error),
) (bool, error) {
	patched := false
	err := retry.RetryOnConflict(conflictBackoff(), func() error {
		u, run, err := r.get(ctx, name)
		if err != nil {
			return err
		}
		ops, err := change(u, run)
		if err != nil || len(ops) == 0 {
			return err
		}
		ops = append([]patchOp{{Op: "replace", Path: "/metadata/resourceVersion", Value: u.GetResourceVersion()}}, ops...)
		body, err := json.Marshal(ops)
		if err != nil {
			return fmt.Errorf("encode the patch of workflowrun %s/%s: %w", r.ns, name, err)
		}
		if _, err := r.client().Patch(ctx, name, types.JSONPatchType, body, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("patch workflowrun %s/%s: %w", r.ns, name, err)
		}
		patched = true
		return nil
	})
	return patched, err
}
