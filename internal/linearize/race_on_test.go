//go:build race

package linearize

// raceEnabled: the race detector is on; tests of no Go code skip.
const raceEnabled = true
