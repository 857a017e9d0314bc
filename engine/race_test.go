//go:build race

package engine_test

// raceEnabled: the race detector multiplies memory (shadow memory) and time,
// so the tests that measure them skip.
const raceEnabled = true
