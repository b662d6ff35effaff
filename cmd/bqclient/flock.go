package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/bq-lock/bq/certs"
)

// lockIdentity takes an exclusive OS lock on IDENTITY.lock so that two
// processes of this machine never use one identity at once: a second session
// of an identity ends the first one's holdings. With try it fails at once
// (ErrBusy) if another process has it; else it waits until ctx ends.
func lockIdentity(ctx context.Context, identity string, try bool) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(identity), 0o700); err != nil {
		return nil, err
	}
	path := identity + ".lock"
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot open %s: %w", path, err)
	}
	release := func() {
		_ = certs.UnlockFile(f)
		_ = f.Close()
	}
	wait := 5 * time.Millisecond
	start := time.Now()
	for {
		locked, err := certs.TryLockFile(f)
		if locked {
			return release, nil
		}
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("cannot lock %s: %w", path, err)
		}
		if try {
			_ = f.Close()
			return nil, &failure{Code: exitBusy, Msg: fmt.Sprintf("another bqclient process is using identity %s (one identity, one process at a time)", identity)}
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			what := fmt.Sprintf("identity %s, which another bqclient process is using", identity)
			if cause := context.Cause(ctx); ctx.Err() == context.Canceled {
				return nil, fail(fmt.Errorf("gave up after %v waiting for %s: %w", time.Since(start).Round(100*time.Millisecond), what, cause))
			}
			return nil, &failure{Code: exitBusy, Msg: fmt.Sprintf("timed out after %v waiting for %s", time.Since(start).Round(100*time.Millisecond), what)}
		case <-time.After(wait):
			wait = min(2*wait, 100*time.Millisecond)
		}
	}
}
