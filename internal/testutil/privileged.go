package testutil

import (
	"os"
	"testing"
)

// RequirePrivilegedEnv names the environment variable that turns the skip
// of a test needing privileges (root, network namespaces, a tmpfs mount)
// into a failure: CI sets it, so a machine that lacks the capability fails
// the run instead of staying green having run none of those tests; a
// developer without root still gets the skip, with its reason.
const RequirePrivilegedEnv = "BQ_REQUIRE_PRIVILEGED"

// PrivilegedRequired reports whether RequirePrivilegedEnv is set.
func PrivilegedRequired() bool { return os.Getenv(RequirePrivilegedEnv) != "" }

// SkipUnprivileged skips t with the reason given, or fails it where
// RequirePrivilegedEnv is set.
func SkipUnprivileged(t testing.TB, format string, args ...any) {
	t.Helper()
	if PrivilegedRequired() {
		t.Fatalf(format+" (and "+RequirePrivilegedEnv+" is set: this machine must run it)", args...)
	}
	t.Skipf(format, args...)
}
