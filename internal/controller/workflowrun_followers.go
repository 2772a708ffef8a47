package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Followers remembers the WorkflowRuns that show a run recorded from another
// object: two WorkflowRuns of a namespace with one spec.idempotencyKey share
// one run, and the inbox announces the run's changes under the namespace and
// name of the object it was recorded from. The InboxWatcher wakes the
// followers of that object with it, so each object follows the shared run as
// promptly as the first. The reconciler adds a follower while its run is
// unfinished and forgets it once the run finished or the object is deleted;
// a restarted manager learns them again as it reconciles every object. The
// zero value is not usable; a nil *Followers remembers nothing.
type Followers struct {
	mu       sync.Mutex
	bySource map[string]map[types.NamespacedName]struct{}
	source   map[types.NamespacedName]string
}

// NewFollowers returns an empty set of followers.
func NewFollowers() *Followers {
	return &Followers{
		bySource: map[string]map[types.NamespacedName]struct{}{},
		source:   map[types.NamespacedName]string{},
	}
}

// Follow records that obj shows the run announced as source ("namespace/name").
func (f *Followers) Follow(source string, obj types.NamespacedName) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if old, ok := f.source[obj]; ok {
		if old == source {
			return
		}
		f.forgetLocked(obj, old)
	}
	set := f.bySource[source]
	if set == nil {
		set = map[types.NamespacedName]struct{}{}
		f.bySource[source] = set
	}
	set[obj] = struct{}{}
	f.source[obj] = source
}

// Forget stops waking obj.
func (f *Followers) Forget(obj types.NamespacedName) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if src, ok := f.source[obj]; ok {
		f.forgetLocked(obj, src)
	}
}

func (f *Followers) forgetLocked(obj types.NamespacedName, source string) {
	delete(f.source, obj)
	if set := f.bySource[source]; set != nil {
		delete(set, obj)
		if len(set) == 0 {
			delete(f.bySource, source)
		}
	}
}

// Of returns the objects following the run announced as source.
func (f *Followers) Of(source string) []types.NamespacedName {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	set := f.bySource[source]
	if len(set) == 0 {
		return nil
	}
	out := make([]types.NamespacedName, 0, len(set))
	for obj := range set {
		out = append(out, obj)
	}
	return out
}

// Len is how many objects are followers.
func (f *Followers) Len() int {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.source)
}
