package verbs

import (
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
	if got := (compDone + 1).String(); got != "compState(13)" {
		t.Fatalf("unknown state prints %q", got)
	}
}
