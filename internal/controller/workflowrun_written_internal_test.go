package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestWrittenObjectsWaitOnlyForTheVersionsAWriteReplaced(t *testing.T) {
	var w writtenObjects
	a, b := types.UID("a"), types.UID("b")
	t0 := time.Unix(1000, 0)
	if w.stale(a, "1", t0) {
		t.Fatal("an object never written was stale")
	}
	// A look adds the finalizer (1 -> 2) and writes the status (2 -> 3).
	w.remember(a, "1", t0)
	w.remember(a, "2", t0.Add(time.Millisecond))
	for _, v := range []string{"1", "2"} {
		if !w.stale(a, v, t0.Add(50*time.Millisecond)) {
			t.Fatalf("version %s, replaced by this manager's writes, was not stale", v)
		}
	}
	if w.stale(b, "1", t0) {
		t.Fatal("another object's version was stale")
	}
	if w.stale(a, "3", t0.Add(60*time.Millisecond)) {
		t.Fatal("the written version was stale")
	}
	// Once the cache showed the write, the entry is gone.
	if w.stale(a, "2", t0.Add(70*time.Millisecond)) {
		t.Fatal("a replaced version was stale after the cache showed the write")
	}
	// Past the limit the cache is not waited for.
	w.remember(a, "3", t0)
	if w.stale(a, "3", t0.Add(staleCacheLimit)) {
		t.Fatal("a write was waited for past staleCacheLimit")
	}
	for i := range 10 {
		w.remember(b, string(rune('a'+i)), t0)
	}
	if got := len(w.m[b].replaced); got != maxReplacedVersions {
		t.Fatalf("remembered %d versions of one object, want at most %d", got, maxReplacedVersions)
	}
	w.forget(b)
	if w.stale(b, "j", t0) {
		t.Fatal("a forgotten object was stale")
	}
}

func TestWrittenObjectsSweepWritesNotLookedAtAgain(t *testing.T) {
	var w writtenObjects
	t0 := time.Unix(1000, 0)
	for i := range 100 {
		w.remember(types.UID(string(rune('a'+i%26))+string(rune('a'+i/26))), "1", t0)
	}
	if len(w.m) != 100 {
		t.Fatalf("%d entries, want 100", len(w.m))
	}
	// The next write after the limit sweeps the old ones (finished runs'
	// last writes, never looked at again) and keeps its own.
	w.remember("fresh", "7", t0.Add(staleCacheLimit))
	if len(w.m) != 1 || !w.stale("fresh", "7", t0.Add(staleCacheLimit)) {
		t.Fatalf("after the sweep %d entries (%v), want only the fresh write", len(w.m), w.m)
	}
}
