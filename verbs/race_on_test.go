//go:build race

package verbs

// raceDetector says the tests run under the race detector, which makes
// the engines about fifteen times slower.
const raceDetector = true
