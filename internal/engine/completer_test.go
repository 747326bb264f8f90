package engine

import (
	"fmt"
	"strings"
	"testing"
)

// TestCompStateNames: every completer state has its own name.
func TestCompStateNames(t *testing.T) {
	seen := map[string]compState{}
	for s := compCheckAck; s <= compDone; s++ {
		name := s.String()
		if name == "" || strings.HasPrefix(name, "compState(") {
			t.Fatalf("state %d has no name", s)
		}
		if prev, dup := seen[name]; dup {
			t.Fatalf("states %d and %d are both %q", prev, s, name)
		}
		seen[name] = s
	}
	if got, want := (compDone + 1).String(), fmt.Sprintf("compState(%d)", compDone+1); got != want {
		t.Fatalf("unknown state prints %q", got)
	}
}
