package controller

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

func registryWithPools(ns, name string, created time.Time, pools map[string][]string) workflowv1alpha1.WorkflowRegistry {
	reg := workflowv1alpha1.WorkflowRegistry{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(created)}}
	for target, prefixes := range pools {
		reg.Spec.Workers = append(reg.Spec.Workers, workflowv1alpha1.WorkerPool{
			ScaleTargetRef: workflowv1alpha1.ScaleTargetRef{Name: target}, TypePrefixes: prefixes})
	}
	return reg
}

func TestPrefixesOverlap(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"billing.", "billing.", true},
		{"billing.", "billing.invoice.", true},
		{"billing.invoice.", "billing.", true},
		{"billing.", "billing", true},
		{"billing.", "bill.", false},
		{"billing.", "shipping.", false},
		{"billing.a.", "billing.b.", false},
		{"a_b.", "axb.", false},
	} {
		if got := prefixesOverlap(c.a, c.b); got != c.want {
			t.Errorf("prefixesOverlap(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestPrefixOwnership(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Prefixes are owned per namespace: these registries share one.
	const ns = "shop"
	regs := []workflowv1alpha1.WorkflowRegistry{
		// Listed out of order: the decision does not depend on list order.
		registryWithPools(ns, "late", t0.Add(2*time.Second), map[string][]string{"w": {"billing.invoice.", "mail."}}),
		registryWithPools(ns, "billing-b", t0, map[string][]string{"w": {"billing."}}),
		// Same creation second as billing-b: the name breaks the tie.
		registryWithPools(ns, "billing-a", t0, map[string][]string{"w": {"billing.refund."}}),
		registryWithPools(ns, "own", t0.Add(3*time.Second), map[string][]string{
			"one": {"ship."}, "two": {"ship.parcel."}}), // its own pools may overlap
		registryWithPools(ns, "other", t0.Add(4*time.Second), map[string][]string{"w": {"mail.x."}}),
	}
	got := prefixOwnership(regs)
	want := map[string]map[string][]prefixConflict{
		"shop/billing-b": {"w": {{Prefix: "billing.", Owner: "shop/billing-a"}}},
		// billing-b's billing. is blocked, so it owns nothing that stops
		// late from owning billing.invoice. and mail.
		"shop/other": {"w": {{Prefix: "mail.x.", Owner: "shop/late"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("prefixOwnership = %v, want %v", got, want)
	}

	// The owner being deleted frees its prefixes: the next oldest takes
	// billing., and late's pool is blocked but still owns mail., which it
	// declared first.
	now := metav1.Now()
	regs[2].DeletionTimestamp = &now
	got = prefixOwnership(regs)
	want = map[string]map[string][]prefixConflict{
		"shop/late":  {"w": {{Prefix: "billing.invoice.", Owner: "shop/billing-b"}}},
		"shop/other": {"w": {{Prefix: "mail.x.", Owner: "shop/late"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after deletion: prefixOwnership = %v, want %v", got, want)
	}
}

// The same or overlapping prefixes in two namespaces are no conflict: each
// namespace's pools serve that namespace's runs. Within a namespace the
// older registry still wins, whatever another namespace declared before.
func TestPrefixOwnershipIsPerNamespace(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	regs := []workflowv1alpha1.WorkflowRegistry{
		registryWithPools("team-b", "team", t0, map[string][]string{"w": {"billing."}}),
		registryWithPools("team-a", "team", t0.Add(time.Second), map[string][]string{"w": {"billing."}}),
		registryWithPools("team-c", "first", t0.Add(2*time.Second), map[string][]string{"w": {"billing.invoice."}}),
		registryWithPools("team-c", "second", t0.Add(3*time.Second), map[string][]string{"w": {"billing."}}),
	}
	got := prefixOwnership(regs)
	want := map[string]map[string][]prefixConflict{
		"team-c/second": {"w": {{Prefix: "billing.", Owner: "team-c/first"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("prefixOwnership = %v, want %v", got, want)
	}
}

func TestPrefixConflictMessageIsBounded(t *testing.T) {
	var conflicts []prefixConflict
	for i := range 500 {
		conflicts = append(conflicts, prefixConflict{
			Prefix: fmt.Sprintf("team%03d.%s.", i, strings.Repeat("x", 200)), Owner: "owner-ns/owner"})
	}
	msg := prefixConflictMessage(conflicts)
	if len(msg) > maxOwnershipMessageBytes {
		t.Fatalf("message is %d bytes, want at most %d", len(msg), maxOwnershipMessageBytes)
	}
	if !strings.Contains(msg, "owned by WorkflowRegistry owner-ns/owner") || !strings.Contains(msg, "more") {
		t.Fatalf("message %q lacks the owner or the count of the rest", msg)
	}
	one := prefixConflictMessage(conflicts[:1])
	if strings.Contains(one, "more") || !strings.Contains(one, "team000.") {
		t.Fatalf("message %q", one)
	}
}

func TestListWithinBytes(t *testing.T) {
	items := []string{"aaaa", "bbbb", "cccc", "dddd"}
	if got := listWithinBytes(items, "; ", 1000); got != "aaaa; bbbb; cccc; dddd" {
		t.Fatalf("got %q", got)
	}
	got := listWithinBytes(items, "; ", 30)
	if len(got) > 30 || !strings.HasPrefix(got, "aaaa") || !strings.HasSuffix(got, "more") {
		t.Fatalf("got %q (%d bytes)", got, len(got))
	}
}
