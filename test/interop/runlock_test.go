package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestRunLockExcludes: while one run holds the lock a second waits (and
// says so) until its context ends; once the first releases it, the second
// gets it.
func TestRunLockExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "interop.lock")
	quiet := func(string, ...any) {}
	release, err := acquireRunLock(t.Context(), path, quiet)
	if err != nil {
		t.Fatal(err)
	}
	said := 0
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	if _, err := acquireRunLock(ctx, path, func(string, ...any) { said++ }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second run while the first holds the lock: %v, want it to wait until its deadline", err)
	}
	if said != 1 {
		t.Fatalf("the waiting run said so %d times, want once", said)
	}
	release()
	again, err := acquireRunLock(t.Context(), path, quiet)
	if err != nil {
		t.Fatalf("after the first run released the lock: %v", err)
	}
	again()
}
