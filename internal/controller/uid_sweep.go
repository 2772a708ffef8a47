package controller

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// sweepOld deletes from m, at most once per age (last is when it last
// ran), the entries whose time (by at) is age or more before now: the
// per-object maps of the run reconciler keep what a later look needs, and
// an object no look comes back for must not stay in them for good.
func sweepOld[V any](m map[types.UID]V, last *time.Time, now time.Time, age time.Duration, at func(V) time.Time) {
	if now.Sub(*last) < age {
		return
	}
	for k, e := range m {
		if now.Sub(at(e)) >= age {
			delete(m, k)
		}
	}
	*last = now
}
