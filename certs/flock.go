package certs

import "os"

// TryLockFile takes an exclusive lock on f without waiting. It returns
// false and no error if another open of the file holds the lock (another
// process, or another open in this one): the "would block" case, told apart
// from every real failure. The lock lasts until UnlockFile or until f is
// closed.
//
// It is flock(2) on Unix and LockFileEx on Windows (on one byte far past the
// end of the file, so that, as with flock, the lock binds only those who take
// it and the contents stay readable). Elsewhere it fails with an error that
// wraps errors.ErrUnsupported.
//
// bq uses it to keep an identity to one process at a time (the session
// counter here, and bqclient's IDENTITY.lock).
func TryLockFile(f *os.File) (locked bool, err error) { return tryLockFile(f) }

// UnlockFile releases a lock TryLockFile took on f.
func UnlockFile(f *os.File) error { return unlockFile(f) }
