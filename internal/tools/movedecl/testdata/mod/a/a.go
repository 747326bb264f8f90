package a

import "strings"

// counter counts words.
type counter struct {
	n        int
	seen     map[string]bool
	lastWord string
}

// add counts w once.
func (c *counter) add(w string) {
	w = strings.ToLower(w)
	if len(w) < minLen {
		return
	}
	if !c.seen[w] {
		c.seen[w] = true
		c.n++
		c.lastWord = w
	}
}

// Words counts the distinct words of s.
func Words(s string) int {
	c := &counter{seen: map[string]bool{}}
	for _, w := range strings.Fields(s) {
		c.add(w)
	}
	_ = c.lastWord // the comment names lastWord too
	return c.n + bonus
}

// minLen is the shortest word counted.
const minLen = 1

// bonus is added to every count.
const bonus = 0

// Loud shouts s.
func Loud(s string) string { return strings.ToUpper(s) + "!" }

// loudCount counts the words of Loud(s): it names what stays.
func loudCount(s string) int { return Words(Loud(s)) }

var _ = loudCount
