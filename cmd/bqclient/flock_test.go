package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Two users of one identity take turns through IDENTITY.lock (on every
// platform): --try is refused at once with exit 8 (identity busy, not the
// lock's exit 3: the lock was not tried, issue 55), naming the process that
// holds it; a wait says at once that it waits, and whom for, and ends with
// exit 8 when its time is up; the identity is free again once released.
func TestLockIdentityTakesTurns(t *testing.T) {
	identity := filepath.Join(t.TempDir(), "sub", "me.key")
	release, err := lockIdentity(context.Background(), identity, true, nil)
	require.NoError(t, err)

	_, err = lockIdentity(context.Background(), identity, true, nil)
	var f *failure
	require.True(t, errors.As(err, &f), "%v", err)
	require.Equal(t, exitIdentityBusy, f.Code)
	require.Contains(t, f.Msg, fmt.Sprintf("identity %s is in use by another bqclient process (pid %d)", identity, os.Getpid()))

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var said bytes.Buffer
	_, err = lockIdentity(ctx, identity, false, &said)
	require.True(t, errors.As(err, &f), "%v", err)
	require.Equal(t, exitIdentityBusy, f.Code)
	require.Contains(t, f.Msg, "waiting for identity "+identity)
	require.Equal(t, fmt.Sprintf("bqclient: waiting for identity %s, in use by another bqclient process (pid %d) (one identity, one process at a time)\n", identity, os.Getpid()), said.String(), "said at once, once")

	release()
	again, err := lockIdentity(context.Background(), identity, true, nil)
	require.NoError(t, err, "free once released")
	again()
}
