package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Two users of one identity take turns through IDENTITY.lock (on every
// platform): --try is refused at once with exit 3, a wait ends with exit 3
// when its time is up, and the identity is free again once released.
func TestLockIdentityTakesTurns(t *testing.T) {
	identity := filepath.Join(t.TempDir(), "sub", "me.key")
	release, err := lockIdentity(context.Background(), identity, true)
	require.NoError(t, err)

	_, err = lockIdentity(context.Background(), identity, true)
	var f *failure
	require.True(t, errors.As(err, &f), "%v", err)
	require.Equal(t, exitBusy, f.Code)
	require.Contains(t, f.Msg, "another bqclient process is using identity "+identity)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = lockIdentity(ctx, identity, false)
	require.True(t, errors.As(err, &f), "%v", err)
	require.Equal(t, exitBusy, f.Code)
	require.Contains(t, f.Msg, "waiting for identity "+identity)

	release()
	again, err := lockIdentity(context.Background(), identity, true)
	require.NoError(t, err, "free once released")
	again()
}
