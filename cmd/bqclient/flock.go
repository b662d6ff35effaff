package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bq-lock/bq/certs"
)

// lockIdentity takes an exclusive OS lock on IDENTITY.lock so that two
// processes of this machine never use one identity at once: a second session
// of an identity ends the first one's holdings. The holder writes its pid
// in the file. With try it fails at once, exit 8 (identity busy), if another
// process has it; else it says at once on say that it waits, naming the
// process, and waits until ctx ends (exit 8 then too: the lock itself may
// be free).
func lockIdentity(ctx context.Context, identity string, try bool, say io.Writer) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(identity), 0o700); err != nil {
		return nil, err
	}
	path := identity + ".lock"
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot open %s: %w", path, err)
	}
	release := func() {
		_ = f.Truncate(0)
		_ = certs.UnlockFile(f)
		_ = f.Close()
	}
	wait := 5 * time.Millisecond
	start := time.Now()
	said := false
	for {
		locked, err := certs.TryLockFile(f)
		if locked {
			// Who holds it, for a second process to name (best effort).
			if f.Truncate(0) == nil {
				_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
			}
			return release, nil
		}
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("cannot lock %s: %w", path, err)
		}
		holder := identityHolder(path)
		if try {
			_ = f.Close()
			return nil, &failure{Code: exitIdentityBusy, Msg: fmt.Sprintf("identity %s is in use by %s (one identity, one process at a time): nothing was tried; give this process its own identity", identity, holder)}
		}
		if !said && say != nil {
			said = true
			fmt.Fprintf(say, "bqclient: waiting for identity %s, in use by %s (one identity, one process at a time)\n", identity, holder)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			what := fmt.Sprintf("identity %s, in use by %s", identity, holder)
			if cause := context.Cause(ctx); ctx.Err() == context.Canceled {
				return nil, fail(fmt.Errorf("gave up after %v waiting for %s: %w", time.Since(start).Round(100*time.Millisecond), what, cause))
			}
			return nil, &failure{Code: exitIdentityBusy, Msg: fmt.Sprintf("timed out after %v waiting for %s", time.Since(start).Round(100*time.Millisecond), what)}
		case <-time.After(wait):
			wait = min(2*wait, 100*time.Millisecond)
		}
	}
}

// identityHolder names the process that holds the identity lock at path,
// as it wrote itself there.
func identityHolder(path string) string {
	b, err := os.ReadFile(path)
	if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil && pid > 0 {
		return fmt.Sprintf("another bqclient process (pid %d)", pid)
	}
	return "another bqclient process"
}
