// Package store is the server's durable key-value store (PROTOCOL.md §9): a
// bbolt file written by one goroutine with group commit.
//
// What the caller does, in order:
//
//  1. Open the file once per process. A second process (or a second Open in
//     this process) waiting longer than Options.LockTimeout for the file lock
//     gets ErrLocked; a damaged file gets ErrCorrupt. Neither is retried here.
//  2. Before sending any acknowledgement that depends on a record, Commit the
//     record and wait for Commit to return nil. nil means the ops are on
//     stable storage (the transaction's pages and meta page are fsync'd);
//     they survive kill -9 and power loss of the machine. Any error means
//     "not acknowledged": do not ack.
//  3. Read with Get and ForEach; they see every Commit that has returned nil,
//     and never a part of one Commit.
//  4. Close once at shutdown; it fails queued Commits with ErrClosed and waits
//     for the transaction in flight.
//
// Group commit. Commit puts its ops on a queue and wakes the single writer
// goroutine. The writer takes every Commit queued at that moment (up to
// Options.MaxBatchOps ops and Options.MaxBatchBytes bytes) and applies them,
// in queue order, in one bbolt read-write transaction, so one fsync of the
// data pages and one of the meta page serve them all. There is no timer:
// while a transaction is being fsync'd, new Commits queue up and form the
// next batch, so batches grow with load and a lone writer pays one fsync.
//
// Failure. A transaction that fails (an I/O error, a full disk, an injected
// fault) fails every Commit in it with the same error and applies none of
// them; the store stays usable, and a later Commit succeeds once the
// condition clears. Records acknowledged earlier are untouched: bbolt writes
// a transaction only into free pages and publishes it by writing the
// alternate meta page, so the previous meta page and the tree it names stay
// intact. One case is indeterminate, as with any database whose fsync
// fails: if the meta page was written but its fsync failed, the kernel's
// page cache already shows the new transaction. Commit then returns an error
// that also matches ErrUncertain: the ops were not acknowledged but may be
// visible and may survive; treat them like a record persisted just before a
// crash, before its ack was sent.
//
// Cancellation. A Commit whose ctx ends while it is still queued is removed
// from the queue and returns ctx.Err(); its ops are never applied. Once the
// writer has taken it into a transaction, Commit waits for that transaction
// and returns its outcome, whatever ctx does (a transaction is bounded by
// MaxBatchOps and MaxBatchBytes).
package store
