// Package testseed is for tests that draw a random seed each run: T is the
// test for their assertions, and every failure it reports (Error, Errorf,
// Fatal, Fatalf, and so every require or assert failure) ends with the seed
// and the command that replays the run. TEST-ONLY: it imports testing.
package testseed

import (
	"fmt"
	"testing"
)

// T is a test whose failures end with Replay.
type T struct {
	testing.TB
	// Replay says the seed and the command that replays it.
	Replay string
}

// New is t for a test of seed that replays with command (a shell line
// that names the seed); it logs the seed at once, too.
func New(t testing.TB, seed uint64, command string) T {
	t.Helper()
	r := fmt.Sprintf("seed %d; replay: %s", seed, command)
	t.Log(r)
	return T{TB: t, Replay: r}
}

func (s T) Error(args ...any) {
	s.TB.Helper()
	s.TB.Error(append(args, "\n"+s.Replay)...)
}

func (s T) Errorf(format string, args ...any) {
	s.TB.Helper()
	s.TB.Errorf(format+"\n%s", append(args, s.Replay)...)
}

func (s T) Fatal(args ...any) {
	s.TB.Helper()
	s.TB.Fatal(append(args, "\n"+s.Replay)...)
}

func (s T) Fatalf(format string, args ...any) {
	s.TB.Helper()
	s.TB.Fatalf(format+"\n%s", append(args, s.Replay)...)
}
