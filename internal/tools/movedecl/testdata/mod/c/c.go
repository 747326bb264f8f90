// Package c uses a's exported names from outside.
package c

import "example.com/m/a"

// Shout is a.Loud.
func Shout(s string) string { return a.Loud(s) }
