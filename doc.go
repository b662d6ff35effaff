// Package bq is the Go client of bq, a distributed lock service that stays
// correct when up to f of its n ≥ 3f+1 servers, and any number of clients,
// are malicious.
//
// Dial connects to a cluster with a client identity (a signing key; its hash
// is the client's id), opens a session and keeps it alive in the background.
// Each lock name is a Mutex:
//
//	c, err := bq.Dial(ctx, bq.Config{ClusterFile: "cluster.yaml", IdentityFile: "me.key"})
//	m := c.Mutex("orders")
//	h, err := m.Lock(ctx) // blocks; first come, first served
//	defer h.Unlock(ctx)
//	for _, batch := range batches {
//		select {
//		case <-h.Lost(): // the lease guarantee failed: stop at once
//			return h.Err()
//		default: // still held: go on
//		}
//		write(h.Token(), batch) // a fencing token: pass it to the resource you protect
//	}
//
// A holding stays valid only while the client's lease guarantee holds
// (docs/protocol.md §5); the moment it fails, Lost is closed. Check it
// without blocking, as above (a select on Lost alone, without default,
// waits until the holding is lost), or wait on it beside your work's own
// channels. Give Token to the resource you protect and have it refuse
// tokens lower than the highest it has seen: that protects it even from a
// holder whose lease ran out.
//
// Besides Mutex (exclusive): RWMutex is a readers–writer lock (RLock for
// readers together, Lock for a writer alone), Semaphore(name, k) lets k
// holders in at once, and LockAll takes several locks in one global order,
// so that programs that take overlapping sets never deadlock; each lock it
// took has its own token (Holdings.Holding, Holdings.List):
//
//	r, err := c.RWMutex("config").RLock(ctx)
//	p, err := c.Semaphore("gpus", 4).Acquire(ctx) // every user of "gpus" gives 4
//	hs, err := c.LockAll(ctx, c.Mutex("accounts/a"), c.Mutex("accounts/b"))
//	write(hs.Holding("accounts/a").Token(), debit)
//
// Lock returns only when the lock is held or its context ends: if the
// session's lease guarantee fails while it waits, it starts over in a new
// session (behind whoever came first meanwhile).
//
// Cancelling the context of Lock or TryLock abandons the attempt and sends
// its Exit; nothing is left behind. A Client is safe for concurrent use; one
// client holds a given lock name at most once at a time (a second Lock on the
// same name from the same client waits for the first Unlock; a second
// TryLock returns ErrBusy). Close abandons every attempt (the Lock calls
// waiting on them return ErrClosed) and releases every holding.
//
// An Election is a lock whose holder, the leader, proclaims a value signed by
// it and tied to its term (the holding's token); observers believe a leader,
// term and value only when f+1 of q servers report them (docs/election.md):
//
//	l, err := c.Election("scheduler").Campaign(ctx, "10.0.0.7:8080") // blocks until leader
//	leader, err := c.Election("scheduler").Leader(ctx)                // value, term, holder
//	err = c.Election("scheduler").Run(ctx, value, fn)                 // fn's ctx ends when the lead is lost
package bq
