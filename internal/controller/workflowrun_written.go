package controller

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// staleCacheWait is how long a look that finds the cache still showing an
// object as it was before this manager's own last write waits for the
// write's watch event before looking again.
const staleCacheWait = 100 * time.Millisecond

// staleCacheLimit bounds how long after a write the cache is waited for:
// past it a look goes on with what the cache shows (a write refused with a
// conflict is then retried as before). An API server busy with thousands
// of new objects delivered watch events more than 2 s late.
const staleCacheLimit = 10 * time.Second

// writtenObjects remembers, per object, the resourceVersion this manager's
// last write replaced, so that a look that reads the object from a cache
// which has not seen the write yet waits for it instead of computing a
// patch bound to be refused with a conflict. An entry lives until a look
// finds another version, the object is deleted, or staleCacheLimit
// passes (a write whose object is not looked at again, a finished run's
// last, is swept once it is that old). The zero value is ready to use.
type writtenObjects struct {
	mu sync.Mutex
	m  map[types.UID]writtenObject
	// swept is when the last sweep of old entries ran.
	swept time.Time
}

// writtenObject is the versions the last writes replaced (a look that adds
// the finalizer and writes the status makes two), and when the last was.
type writtenObject struct {
	replaced []string
	at       time.Time
}

// maxReplacedVersions bounds the versions remembered per object.
const maxReplacedVersions = 4

// remember records that a write at now replaced version replaced of the
// object.
func (w *writtenObjects) remember(uid types.UID, replaced string, now time.Time) {
	if replaced == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[types.UID]writtenObject{}
	}
	sweepOld(w.m, &w.swept, now, staleCacheLimit, func(e writtenObject) time.Time { return e.at })
	e := w.m[uid]
	if len(e.replaced) == maxReplacedVersions {
		e.replaced = e.replaced[1:]
	}
	w.m[uid] = writtenObject{replaced: append(e.replaced, replaced), at: now}
}

// stale reports whether version of the object, read at now, is the one
// this manager's last write replaced, within staleCacheLimit of the write;
// any other answer forgets the write.
func (w *writtenObjects) stale(uid types.UID, version string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[uid]
	if !ok {
		return false
	}
	if slices.Contains(e.replaced, version) && now.Sub(e.at) < staleCacheLimit {
		return true
	}
	delete(w.m, uid)
	return false
}

func (w *writtenObjects) forget(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, uid)
}
