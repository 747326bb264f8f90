// A counter and the tally it shares.

package e

// tally is what a counter shares.
type tally struct{ n int }

func (t *tally) bump() { t.n++ }

// Counter embeds the tally it shares.
type Counter struct {
	*tally
	name string
}

// New names the embedded field in a composite literal.
func New(name string) *Counter { return &Counter{tally: &tally{}, name: name} }

// Count selects the embedded field by name and through it.
func (c *Counter) Count() int {
	c.bump()
	return c.tally.n + c.n + newPair().other
}

// pair moves with tally and embeds it too.
type pair struct {
	*tally
	other int
}

func newPair() *pair {
	p := &pair{tally: &tally{}}
	p.tally.bump()
	p.other = p.tally.n
	return p
}
