package controller

import (
	"fmt"
	"sort"
	"strings"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// maxOwnershipMessageBytes bounds a condition message that lists conflicts,
// so a registry with hundreds of them can still write its status.
const maxOwnershipMessageBytes = 2048

// prefixesOverlap reports whether one literal type prefix is a prefix of the
// other: a run matching the longer one matches both.
func prefixesOverlap(a, b string) bool {
	return strings.HasPrefix(a, b) || strings.HasPrefix(b, a)
}

// prefixConflict is one type prefix of a pool that overlaps a prefix owned by
// another registry.
type prefixConflict struct {
	Prefix string
	// Owner is the owning registry as namespace/name.
	Owner string
}

// prefixOwnership decides which registry owns each worker pool type prefix
// within its namespace (pools of two namespaces serve different runs, so
// the same prefix in two namespaces is no conflict): registries are taken oldest first (creation time, then
// namespace, then name, so every manager decides the same), and a prefix is
// owned by the first registry that declares it unless it overlaps a prefix an
// older registry already owns. Registries being deleted own nothing. The
// result maps a registry key (namespace/name) and pool target name to the
// pool's conflicts; pools without conflicts are absent.
func prefixOwnership(regs []workflowv1alpha1.WorkflowRegistry) map[string]map[string][]prefixConflict {
	order := make([]*workflowv1alpha1.WorkflowRegistry, 0, len(regs))
	for i := range regs {
		if regs[i].DeletionTimestamp.IsZero() {
			order = append(order, &regs[i])
		}
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	type owned struct{ prefix, owner string }
	taken := map[string][]owned{} // by namespace
	out := map[string]map[string][]prefixConflict{}
	for _, reg := range order {
		key := reg.Namespace + "/" + reg.Name
		var mine []owned
		for _, w := range reg.Spec.Workers {
			var conflicts []prefixConflict
			for _, p := range w.TypePrefixes {
				owner := ""
				for _, t := range taken[reg.Namespace] {
					if prefixesOverlap(p, t.prefix) {
						owner = t.owner
						break
					}
				}
				if owner != "" {
					conflicts = append(conflicts, prefixConflict{Prefix: p, Owner: owner})
					continue
				}
				mine = append(mine, owned{prefix: p, owner: key})
			}
			if len(conflicts) > 0 {
				if out[key] == nil {
					out[key] = map[string][]prefixConflict{}
				}
				out[key][w.ScaleTargetRef.Name] = conflicts
			}
		}
		// A registry's own pools may overlap each other: one owner.
		taken[reg.Namespace] = append(taken[reg.Namespace], mine...)
	}
	return out
}

// prefixConflictMessage says which of a pool's prefixes are owned elsewhere,
// naming only the owners, within maxOwnershipMessageBytes.
func prefixConflictMessage(conflicts []prefixConflict) string {
	items := make([]string, len(conflicts))
	for i, c := range conflicts {
		items[i] = fmt.Sprintf("type prefix %q overlaps a prefix owned by WorkflowRegistry %s", c.Prefix, c.Owner)
	}
	return listWithinBytes(items, "; ", maxOwnershipMessageBytes-80) +
		"; the pool is not scaled while the owner keeps it"
}
