package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// recordedRuns remembers the run id of each object whose run a look just
// recorded but whose status it did not write yet (see quietStart), so that
// the next look reads the run by id instead of recording it again. An entry
// lives until the object's status names the run or the object is deleted;
// a restarted manager finds the run through the idempotency key instead.
// The zero value is ready to use.
type recordedRuns struct {
	mu  sync.Mutex
	ids map[types.UID]string
}

func (m *recordedRuns) remember(uid types.UID, runID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ids == nil {
		m.ids = map[types.UID]string{}
	}
	m.ids[uid] = runID
}

func (m *recordedRuns) recall(uid types.UID) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ids[uid]
}

func (m *recordedRuns) forget(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.ids, uid)
}
