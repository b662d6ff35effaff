package store

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine is left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// openTest opens a store in a fresh temporary directory and closes it at the
// end of the test unless the test closed it.
func openTest(t testing.TB, opts Options) *Store {
	t.Helper()
	return openAt(t, filepath.Join(t.TempDir(), "bq.db"), opts)
}

func openAt(t testing.TB, path string, opts Options) *Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	s, err := Open(path, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func put(bucket, key, value string) Op {
	return Op{Bucket: bucket, Key: []byte(key), Value: []byte(value)}
}

func del(bucket, key string) Op {
	return Op{Bucket: bucket, Key: []byte(key), Delete: true}
}

func requireValue(t testing.TB, s *Store, bucket, key, want string) {
	t.Helper()
	got, err := s.Get(bucket, []byte(key))
	require.NoError(t, err)
	require.NotNil(t, got, "%s/%s missing", bucket, key)
	require.Equal(t, want, string(got), "%s/%s", bucket, key)
}

func requireAbsent(t testing.TB, s *Store, bucket, key string) {
	t.Helper()
	got, err := s.Get(bucket, []byte(key))
	require.NoError(t, err)
	require.Nil(t, got, "%s/%s should be absent", bucket, key)
}

// gate blocks the writer before its next transaction while armed, so a
// test can queue Commits behind it and know exactly how they are grouped.
type gate struct {
	armed   chan struct{} // has a token while the next transaction must stop
	entered chan int      // the stopped transaction's commit count
	release chan struct{} // lets the stopped transaction go
}

func newGate() (*gate, *testHooks) {
	g := &gate{
		armed:   make(chan struct{}, 1),
		entered: make(chan int),
		release: make(chan struct{}),
	}
	return g, &testHooks{beforeTxn: func(n int) {
		select {
		case <-g.armed:
			g.entered <- n
			<-g.release
		default:
		}
	}}
}

// hold makes the writer stop before the next transaction it starts.
func (g *gate) hold() { g.armed <- struct{}{} }

// commitAsync runs Commit in a goroutine and returns where its result goes.
func commitAsync(ctx context.Context, s *Store, ops ...Op) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- s.Commit(ctx, ops...) }()
	return ch
}

// waitQueued waits until n Commits are queued and not yet taken.
func waitQueued(t testing.TB, s *Store, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.queue) == n
	}, 10*time.Second, time.Millisecond, "waiting for %d queued commits", n)
}

func recv(t testing.TB, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Commit did not return")
		return nil
	}
}

// Injected write errors, as os.File.WriteAt and bbolt's page writes
// return them: a full disk (the store stays usable) and an I/O error (the
// store fails for good).
var (
	errNoSpace = &os.PathError{Op: "write", Path: "injected", Err: syscall.ENOSPC}
	errIO      = &os.PathError{Op: "write", Path: "injected", Err: syscall.EIO}
)

// fault is an error that a test hook returns, switched on and off by the
// test while the writer or the checkpointer may be calling the hook.
type fault struct {
	mu  sync.Mutex
	err error
}

func (f *fault) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fault) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
