package testseed

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// recorder records the failures reported to it instead of failing.
type recorder struct {
	testing.TB
	got []string
}

func (r *recorder) Helper()           {}
func (r *recorder) Log(args ...any)   {}
func (r *recorder) Error(args ...any) { r.got = append(r.got, fmt.Sprint(args...)) }
func (r *recorder) Errorf(format string, args ...any) {
	r.got = append(r.got, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatal(args ...any) { r.got = append(r.got, fmt.Sprint(args...)) }
func (r *recorder) Fatalf(format string, args ...any) {
	r.got = append(r.got, fmt.Sprintf(format, args...))
}
func (r *recorder) FailNow() {}

// Every way a test reports a failure, a require assertion's too, ends with
// the seed and the replay command.
func TestFailuresSayTheReplay(t *testing.T) {
	r := &recorder{TB: t}
	s := New(r, 7, "go test ./x -run '^TestX$' -seed 7")
	s.Error("got", 1)
	s.Errorf("got %d", 2)
	s.Fatal("got", 3)
	s.Fatalf("got %d", 4)
	require.Equal(s, 5, 6)
	require.Len(t, r.got, 5)
	for _, g := range r.got {
		require.Contains(t, g, "\nseed 7; replay: go test ./x -run '^TestX$' -seed 7", "%q", g)
	}
	require.Contains(t, r.got[1], "got 2\n")
	require.Contains(t, r.got[4], "Not equal")
}
