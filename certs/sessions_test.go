package certs

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func sessionCounterOf(t *testing.T, s uint64) uint64 { t.Helper(); return s >> SessionRandBits }

// docs/protocol.md §2: session numbers grow strictly, within one process and
// across processes, and each is on disk before it is used.
func TestSessionCounterGrowsAndPersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "id.key.session")
	sc, err := OpenSessionCounter(path, rand.Reader)
	require.NoError(t, err)
	var last uint64
	for range 50 {
		s, err := sc.NextSession()
		require.NoError(t, err)
		require.Greater(t, s, last)
		last = s
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		onDisk, err := parseCounter(data)
		require.NoError(t, err)
		require.Equal(t, sessionCounterOf(t, s), onDisk, "the number in use is on disk")
	}
	require.NoError(t, sc.Close())

	// The next process (a reopen) continues above.
	sc, err = OpenSessionCounter(path, rand.Reader)
	require.NoError(t, err)
	s, err := sc.NextSession()
	require.NoError(t, err)
	require.Greater(t, s, last)
	require.NoError(t, sc.Close())
	_, err = sc.NextSession()
	require.Error(t, err, "a closed counter hands out nothing")
}

// A new counter starts above every session of the old wall-clock numbering
// (microseconds since 1970) and never reads the clock.
func TestSessionCounterStartsAboveTheClock(t *testing.T) {
	sc, err := OpenSessionCounter(filepath.Join(t.TempDir(), "x.session"), rand.Reader)
	require.NoError(t, err)
	defer sc.Close()
	s, err := sc.NextSession()
	require.NoError(t, err)
	require.Greater(t, s, uint64(time.Now().UnixMicro()))
	require.Equal(t, sessionCounterStart, sessionCounterOf(t, s))
}

// Two copies of one counter (an identity copied to two machines) still give
// different sessions, so the two are never taken for one equivocating client.
func TestSessionCounterCopiesDiffer(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.session")
	sc, err := OpenSessionCounter(a, rand.Reader)
	require.NoError(t, err)
	_, err = sc.NextSession()
	require.NoError(t, err)
	require.NoError(t, sc.Close())
	data, err := os.ReadFile(a)
	require.NoError(t, err)
	b := filepath.Join(dir, "b.session")
	require.NoError(t, os.WriteFile(b, data, 0o600))

	one, err := OpenSessionCounter(a, bytes.NewReader(bytes.Repeat([]byte{0x11}, 64)))
	require.NoError(t, err)
	two, err := OpenSessionCounter(b, bytes.NewReader(bytes.Repeat([]byte{0x22}, 64)))
	require.NoError(t, err)
	s1, err := one.NextSession()
	require.NoError(t, err)
	s2, err := two.NextSession()
	require.NoError(t, err)
	require.Equal(t, sessionCounterOf(t, s1), sessionCounterOf(t, s2))
	require.NotEqual(t, s1, s2)
	require.NoError(t, errors.Join(one.Close(), two.Close()))
}

// A damaged counter is refused with an error that names it; bq never
// guesses a value that could go back.
func TestSessionCounterDamaged(t *testing.T) {
	good := formatCounter(12345)
	for name, data := range map[string][]byte{
		"truncated":      good[:len(good)-3],
		"bad checksum":   bytes.Replace(good, []byte("12345"), []byte("12346"), 1),
		"garbage":        bytes.Repeat([]byte("x"), len(good)),
		"trailing bytes": append(append([]byte(nil), good...), '\n'),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "id.session")
			require.NoError(t, os.WriteFile(path, data, 0o600))
			_, err := OpenSessionCounter(path, rand.Reader)
			require.ErrorContains(t, err, path)
			require.ErrorContains(t, err, "damaged")
			after, _ := os.ReadFile(path)
			require.Equal(t, data, after, "left as it was")
		})
	}
}

// One identity, one process: a second process that opens the counter while
// the first holds it gets ErrIdentityInUse, and gets it once the first ends.
func TestSessionCounterOneProcessAtATime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "id.session")
	other := func() string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSessionCounterHelper$")
		cmd.Env = append(os.Environ(), "BQ_TEST_COUNTER_PATH="+path)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	sc, err := OpenSessionCounter(path, rand.Reader)
	require.NoError(t, err)
	require.Contains(t, other(), "helper: in use: certs: identity in use: "+path+" is locked by another process of this machine")
	require.NoError(t, sc.Close())
	require.Contains(t, other(), "helper: opened")
}

// Two opens of one counter in one process exclude each other too (two
// Clients of one identity in one program), and the error says it is this
// process (issue 55: it said "another process"), also through another path
// to the same file.
func TestSessionCounterTwoOpens(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "id.session")
	sc, err := OpenSessionCounter(path, rand.Reader)
	require.NoError(t, err)
	_, err = OpenSessionCounter(path, rand.Reader)
	require.ErrorIs(t, err, ErrIdentityInUse)
	require.EqualError(t, err, "certs: identity in use: "+path+" is open in this process already")
	require.NoError(t, os.Symlink(path, filepath.Join(dir, "link.session")))
	_, err = OpenSessionCounter(filepath.Join(dir, "link.session"), rand.Reader)
	inUse, ok := errors.AsType[*InUseError](err)
	require.True(t, ok, "%v", err)
	require.True(t, inUse.ThisProcess, "the same file by another name")
	require.NoError(t, sc.Close())
	sc, err = OpenSessionCounter(path, rand.Reader)
	require.NoError(t, err, "free once the first is closed")
	require.NoError(t, sc.Close())
}

// TestSessionCounterHelper is the other process of the test above.
func TestSessionCounterHelper(t *testing.T) {
	path := os.Getenv("BQ_TEST_COUNTER_PATH")
	if path == "" {
		t.Skip("run by TestSessionCounterOneProcessAtATime")
	}
	sc, err := OpenSessionCounter(path, rand.Reader)
	if errors.Is(err, ErrIdentityInUse) {
		fmt.Println("helper: in use:", err)
		return
	}
	require.NoError(t, err)
	fmt.Println("helper: opened")
	require.NoError(t, sc.Close())
}
