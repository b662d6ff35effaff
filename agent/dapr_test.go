package agent

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Dapr's lock API: TryLock succeeds once, then answers false while held
// (also to its own owner, as Dapr's stores do); Unlock by another owner is
// status 2, of an unknown resource 1, by the owner 0, after which another
// client enters; a lock whose expiry passed is gone (status 1).
func TestDaprLockAPI(t *testing.T) {
	e := newEnv(t, Config{ReleaseLostAfter: 50 * time.Millisecond})
	lock := func(owner string, expiry int) map[string]any {
		var out map[string]any
		require.Equal(t, http.StatusOK, e.call("POST", "/v1.0-alpha1/lock/bq", map[string]any{"resourceId": "orders", "lockOwner": owner, "expiryInSeconds": expiry}, &out))
		return out
	}
	unlock := func(res, owner string) float64 {
		var out map[string]any
		require.Equal(t, http.StatusOK, e.call("POST", "/v1.0-alpha1/unlock/bq", map[string]any{"resourceId": res, "lockOwner": owner}, &out))
		return out["status"].(float64)
	}
	got := lock("alice", 60)
	require.Equal(t, true, got["success"])
	require.NotEmpty(t, got["token"])
	require.Equal(t, false, lock("bob", 60)["success"])
	require.Equal(t, false, lock("alice", 60)["success"])
	require.EqualValues(t, daprBelongsToOther, unlock("orders", "bob"))
	require.EqualValues(t, daprNotExist, unlock("nothing", "alice"))
	require.EqualValues(t, daprUnlocked, unlock("orders", "alice"))
	require.EqualValues(t, daprNotExist, unlock("orders", "alice"))

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	h, err := e.dial().Mutex("orders").Lock(ctx)
	require.NoError(t, err, "released at the servers")
	require.NoError(t, h.Unlock(ctx))

	require.Equal(t, true, lock("carol", 1)["success"])
	require.Eventually(t, func() bool { return lock("dave", 60)["success"] == true }, waitTimeout, 50*time.Millisecond, "the expiry ended carol's lock")
	require.EqualValues(t, daprBelongsToOther, unlock("orders", "carol"), "dave holds it now")
	require.EqualValues(t, daprUnlocked, unlock("orders", "dave"))

	var body errorBody
	require.Equal(t, http.StatusBadRequest, e.call("POST", "/v1.0-alpha1/lock/bq", map[string]any{"resourceId": "x", "lockOwner": "a"}, &body))
	require.Equal(t, "expiryInSeconds", body.Error.Field)
}
