package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bq-lock/bq/server/store"
)

// Fail-stop (docs/protocol.md change 69, rule 5): a server whose store
// fails for good — its disk changed what it stored, an fdatasync failed, or
// an I/O error on its data files — stops voting, signing and answering at
// once and counts as crashed, never as Byzantine. It logs what failed,
// Failed is closed, and 'bqserver run' exits with code 9. After an
// integrity failure it also writes CorruptFileName in its directory, and
// Start refuses to run it while that file is there: the repair is a replace
// (rule 7), never a restart under the same identity on state it cannot
// vouch for.

// CorruptFileName is the file a server writes in its own directory
// (server-<i>/) when its store finds damage.
const CorruptFileName = "CORRUPT"

// MarkedCorruptError is Start's error for a server whose directory holds
// CorruptFileName. It matches store.ErrFailed and store.ErrCorrupt.
type MarkedCorruptError struct {
	// Path is the file; Text is what it says (the first failure's words).
	Path, Text string
}

func (e *MarkedCorruptError) Error() string {
	return fmt.Sprintf("server: refusing to start: %s says its store was found corrupt (%s); replace this member ('bqserver server replace', the runbook's \"a server's disk is corrupt\"), do not restart it",
		e.Path, firstLine(e.Text))
}

// Is makes a MarkedCorruptError match store.ErrFailed and store.ErrCorrupt.
func (e *MarkedCorruptError) Is(target error) bool {
	return target == store.ErrFailed || target == store.ErrCorrupt
}

// checkCorruptMark returns a MarkedCorruptError if dir holds CorruptFileName.
func checkCorruptMark(dir string) error {
	path := filepath.Join(dir, CorruptFileName)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("server: reading %s: %w", path, err)
	}
	return &MarkedCorruptError{Path: path, Text: strings.TrimSpace(string(b))}
}

// CorruptMark returns what server directory dir's CorruptFileName says, and
// whether it is there (for 'bqserver server list').
func CorruptMark(dir string) (string, bool) {
	var m *MarkedCorruptError
	if errors.As(checkCorruptMark(dir), &m) {
		return firstLine(m.Text), true
	}
	return "", false
}

// markCorrupt writes CorruptFileName in dir if cause is an integrity
// failure (store.ErrCorrupt): what failed, when, and what to do. It is
// written whole or not at all (a temporary file renamed into place, both
// synced); failing to write it is logged by the caller, and changes
// nothing else: the server stops either way.
func markCorrupt(dir string, cause error, now time.Time) error {
	if !errors.Is(cause, store.ErrCorrupt) {
		return nil
	}
	text := fmt.Sprintf("%s\nfound at %s\n\n%s\n", cause, now.UTC().Format(time.RFC3339),
		"This server's disk changed what it had stored, and the server stopped before it said anything wrong.\n"+
			"Repair: replace it with a new identity that copies its state from the other members\n"+
			"('bqserver server replace', possibly at the same address; the README's runbook: \"a server's disk is corrupt\").\n"+
			"Do not delete this file to restart it under its old identity: it would forget what it endorsed, voted and acknowledged.")
	path := filepath.Join(dir, CorruptFileName)
	tmp, err := os.CreateTemp(dir, CorruptFileName+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(text)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err == nil {
		err = store.SyncDir(dir)
	}
	return err
}

// startFailed is Start's error path for an error of the store (opening or
// restoring it): an integrity failure marks the directory first.
func startFailed(dir string, err error) error {
	if errors.Is(err, store.ErrCorrupt) {
		if merr := markCorrupt(dir, err, time.Now()); merr != nil {
			return fmt.Errorf("%w (and writing %s failed: %v)", err, filepath.Join(dir, CorruptFileName), merr)
		}
	}
	return err
}

// failStop stops the server at once because its store failed with cause:
// it stops answering and sending (the transport closes), stops the loops,
// marks the directory after an integrity failure, and closes Failed.
func (s *Server) failStop(cause error) {
	s.failOnce.Do(func() {
		_ = s.transport.Close()
		s.cancel()
		s.metrics.StoreFailed.Set(1)
		attrs := []any{"err", cause}
		var ie *store.IntegrityError
		if errors.As(cause, &ie) {
			attrs = append(attrs, "file", ie.File)
			if ie.Bucket != "" || ie.Key != nil {
				attrs = append(attrs, "bucket", ie.Bucket, "key", fmt.Sprintf("%x", ie.Key))
			}
		}
		if errors.Is(cause, store.ErrCorrupt) {
			s.log.Error("this server's disk changed what it stored: it stopped voting, signing and answering, and counts as crashed; replace it (the README's runbook: \"a server's disk is corrupt\")", attrs...)
			if err := markCorrupt(s.Material.Dir, cause, time.Now()); err != nil {
				s.log.Error("could not write the corrupt mark; do not restart this server", "file", filepath.Join(s.Material.Dir, CorruptFileName), "err", err)
			}
		} else {
			s.log.Error("this server's store failed (an fdatasync or an I/O error on its data files): it stopped voting, signing and answering, and counts as crashed; check the disk before restarting it", attrs...)
		}
		s.failure = cause
		close(s.failed)
	})
}

// watchStore stops the server as soon as its store fails for good, found by
// any reader or writer (a Commit, the scrub), until ctx ends.
func (s *Server) watchStore(ctx context.Context) {
	select {
	case <-s.store.FailedChan():
		s.failStop(s.store.Failed())
	case <-ctx.Done():
	}
}

// Failed is closed when the server stopped itself because its store failed
// for good; Failure then says why ('bqserver run' exits with code 9). Close
// must still be called.
func (s *Server) Failed() <-chan struct{} { return s.failed }

// Failure is why the server stopped itself (nil until Failed is closed).
func (s *Server) Failure() error {
	select {
	case <-s.failed:
		return s.failure
	default:
		return nil
	}
}

// firstLine is text up to its first newline.
func firstLine(text string) string {
	line, _, _ := strings.Cut(text, "\n")
	return line
}
