package core

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	"github.com/bq-lock/bq/activeset"
	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/detector"
	"github.com/bq-lock/bq/wire"
)

// The buckets a server persists (docs/protocol.md §9).
const (
	bucketStmt = "stmt" // lock NUL client → highest SignedStatement
	bucketHW   = "hw"   // lock → highest Ticket ever accepted
	bucketVote = "vote" // client ‖ session → this server's own SignedSuspect
	bucketCert = "cert" // client → highest ResetCertificate
	bucketBan  = "ban"  // client → the Evidence that convicted it
	bucketJust = "just" // lock NUL client → the register's Ticket with its J (a wire.Forward)
	// bucketTTL: client ‖ session → the lease TTL the client asked for that
	// session, in milliseconds (4 bytes, big-endian): a restarted server runs
	// the session's lease with it, never with its default (§5).
	bucketTTL = "ttl"
	// bucketSettled: client → the session its certificate ended (8 bytes,
	// big-endian), for a client compacted past CertRetention (change 26).
	bucketSettled = "settled"
	// bucketSpoke: client → the highest session it spoke in on its own
	// connection here (8 bytes, big-endian; change 33). Durable before any
	// statement of that session is acknowledged, so probation never drops
	// what this server acknowledged to the client itself, also after a
	// restart.
	bucketSpoke = "spoke"
)

// spoke notes that c itself spoke in session sess here, and persists it
// when it is a new highest (change 33).
func (k *Core) spoke(c wire.ClientID, sess uint64, e *Effects) {
	if k.mute.Spoke(c, sess) {
		e.Persist = append(e.Persist, Record{Bucket: bucketSpoke, Key: bytesOf(c), Value: binary.BigEndian.AppendUint64(nil, sess)})
	}
}

// ttlRecord is the record of c's session sess: its TTL (4 bytes, big
// endian), then the client's signed open of it, if kept (change 48).
func ttlRecord(c wire.ClientID, sess uint64, ttl time.Duration, open *wire.SignedOpen) Record {
	v := binary.BigEndian.AppendUint32(nil, uint32(ttl/time.Millisecond))
	if open != nil {
		v = append(v, mustMarshal(open)...)
	}
	return Record{Bucket: bucketTTL, Key: voteKey(c, sess), Value: v}
}

// checkOpen checks a SessionOpen's signed open, if it carries one: its
// client's, of this cluster, for this session and TTL (change 48). An open
// without one (a client before protocol 1.7) is taken as before.
func checkOpen(cluster wire.ClusterID, c wire.ClientID, so *wire.SessionOpen) error {
	if so.Signed == nil {
		return nil
	}
	b, err := so.Signed.Verify(cluster)
	if err != nil {
		return err
	}
	if b.Client != c || b.Session != so.Session || b.TTLMillis != so.TTLMillis {
		return fmt.Errorf("core: the signed open is of %s session %d with %d ms, the request of %s session %d with %d ms", b.Client, b.Session, b.TTLMillis, c, so.Session, so.TTLMillis)
	}
	return nil
}

func stmtKey(lock string, c wire.ClientID) []byte {
	k := make([]byte, 0, len(lock)+1+len(c))
	k = append(k, lock...)
	k = append(k, 0)
	return append(k, c[:]...)
}

func voteKey(c wire.ClientID, sess uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), c[:]...), sess)
}

func mustMarshal(v any) []byte {
	b, err := crypto.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("core: encoding our own %T: %v", v, err))
	}
	return b
}

// Restore loads what earlier runs persisted. Everything is verified again,
// so a corrupted file is reported instead of believed. Certificates come
// first: a value, vote or TTL of a session one of them ended is not
// restored but deleted with the first Tick (collection, change 22).
func (k *Core) Restore(r Reader) error {
	if err := k.restoreEpochs(r); err != nil {
		return err
	}
	if err := k.restoreEndorsed(r); err != nil {
		return err
	}
	if err := k.restoreEndorseKey(r); err != nil {
		return err
	}
	if err := k.restoreConflict(r); err != nil {
		return err
	}
	err := r.ForEach(bucketCert, func(_, v []byte) error {
		var cert wire.ResetCertificate
		if err := crypto.Unmarshal(v, &cert); err != nil {
			return err
		}
		if err := k.mute.RestoreCertificate(&cert); err != nil {
			return err
		}
		// After a restart every client with a certificate is on
		// probation (change 33): probation is not on disk, and refusing
		// forwards of sessions no one spoke in here is always safe.
		k.onProbation(cert.Client, cert.Session)
		return nil
	})
	if err != nil {
		return fmt.Errorf("core: restoring reset certificates: %w", err)
	}
	err = r.ForEach(bucketSettled, func(key, v []byte) error {
		if len(key) != len(wire.ClientID{}) || len(v) != 8 {
			return fmt.Errorf("a settled record of %d and %d bytes", len(key), len(v))
		}
		k.mute.RestoreSettled(wire.ClientID(key), binary.BigEndian.Uint64(v))
		k.onProbation(wire.ClientID(key), binary.BigEndian.Uint64(v))
		return nil
	})
	if err != nil {
		return fmt.Errorf("core: restoring settled clients: %w", err)
	}
	err = r.ForEach(bucketSpoke, func(key, v []byte) error {
		if len(key) != len(wire.ClientID{}) || len(v) != 8 {
			return fmt.Errorf("a spoke record of %d and %d bytes", len(key), len(v))
		}
		k.mute.Spoke(wire.ClientID(key), binary.BigEndian.Uint64(v))
		return nil
	})
	if err != nil {
		return fmt.Errorf("core: restoring who spoke in which session: %w", err)
	}
	var justCollected [][]byte
	err = r.ForEach(bucketStmt, func(key, v []byte) error {
		en, err := k.restoreEntry(v)
		if err != nil {
			return err
		}
		st := en.St
		if string(key) != string(stmtKey(st.Lock, st.Client)) {
			return fmt.Errorf("statement stored under the wrong key: %s", st)
		}
		if st.Session <= k.mute.ResetUpTo(st.Client) {
			k.collectOnStart = append(k.collectOnStart, Record{Bucket: bucketStmt, Key: bytes.Clone(key), Delete: true})
			justCollected = append(justCollected, bytes.Clone(key))
			return nil
		}
		lock := k.restoredLock(st.Lock)
		before := lock.Bytes()
		lock.Restore(en)
		k.lockChanged(lock, before)
		k.noteClientLock(st.Client, st.Lock)
		k.restored = append(k.restored, en)
		return nil
	})
	if err != nil {
		return fmt.Errorf("core: restoring statements: %w", err)
	}
	for _, key := range justCollected {
		k.collectOnStart = append(k.collectOnStart, Record{Bucket: bucketJust, Key: key, Delete: true})
	}
	err = r.ForEach(bucketHW, func(key, v []byte) error {
		en, err := k.restoreEntry(v)
		if err != nil {
			return err
		}
		k.restoredLock(string(key)).RestoreHW(en)
		return nil
	})
	if err != nil {
		return fmt.Errorf("core: restoring high-water marks: %w", err)
	}
	err = r.ForEach(bucketJust, func(key, v []byte) error {
		k.restoreJustified(key, v)
		return nil
	})
	if err == nil {
		err = r.ForEach(bucketHWJ, func(key, v []byte) error {
			k.restoreHWJ(key, v)
			return nil
		})
	}
	if err != nil {
		return fmt.Errorf("core: restoring justifications: %w", err)
	}
	err = r.ForEach(bucketBan, func(key, v []byte) error {
		var ev wire.Evidence
		if err := crypto.Unmarshal(v, &ev); err != nil {
			return err
		}
		keys, q, _ := k.keysForJ(ev.J, k.anyJ())
		c, err := detector.CheckEvidence(&ev, keys, q, k.verify)
		if err != nil {
			return err
		}
		k.banned[c] = &ev
		for _, name := range sortedKeys(k.clientLocks[c]) {
			lock := k.locks[name]
			before := lock.Bytes()
			lock.Forget(c)
			k.lockChanged(lock, before)
			k.dropJustified(regKey{name, c})
			k.releaseClientLock(c, name)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("core: restoring bans: %w", err)
	}
	err = r.ForEach(bucketRevoked, func(_, v []byte) error { return k.restoreRevocation(v) })
	if err != nil {
		return fmt.Errorf("core: restoring revocations: %w", err)
	}
	err = r.ForEach(bucketVote, func(key, v []byte) error {
		var vote wire.SignedSuspect
		if err := crypto.Unmarshal(v, &vote); err != nil {
			return err
		}
		var pre wire.SuspectBody
		if err := crypto.Unmarshal(vote.Signed.Body, &pre); err == nil && pre.Epoch < k.cfg.Keys.Epoch && vote.Server == k.cfg.Self {
			// Our own vote of an epoch before the one served: it counts
			// for nothing here, and is cast again in the served epoch only
			// when the session's lease runs out, a whole TTL from the first
			// tick (change 57), as at the copy's end.
			if pre.Session <= k.mute.ResetUpTo(pre.Client) {
				k.collectOnStart = append(k.collectOnStart, Record{Bucket: bucketVote, Key: bytes.Clone(key), Delete: true})
				return nil
			}
			k.mute.RestoreRevote(pre.Client, pre.Session, pre.Reason)
			return nil
		}
		body, err := vote.Verify(k.cfg.Keys)
		if err != nil {
			return err
		}
		if body.Session <= k.mute.ResetUpTo(body.Client) {
			k.collectOnStart = append(k.collectOnStart, Record{Bucket: bucketVote, Key: bytes.Clone(key), Delete: true})
			return nil
		}
		return k.mute.RestoreVote(vote)
	})
	if err == nil {
		err = r.ForEach(bucketTTL, func(key, v []byte) error {
			if len(key) != 32+8 || len(v) < 4 {
				return fmt.Errorf("a lease TTL record of %d+%d bytes", len(key), len(v))
			}
			c, sess := wire.ClientID(key[:32]), binary.BigEndian.Uint64(key[32:])
			if sess <= k.mute.ResetUpTo(c) {
				k.collectOnStart = append(k.collectOnStart, Record{Bucket: bucketTTL, Key: bytes.Clone(key), Delete: true})
				return nil
			}
			ttl := time.Duration(binary.BigEndian.Uint32(v)) * time.Millisecond
			k.mute.RestoreTTL(c, sess, ttl)
			if len(v) > 4 {
				var o wire.SignedOpen
				if err := crypto.Unmarshal(v[4:], &o); err != nil {
					return fmt.Errorf("the signed open of %s session %d: %w", c, sess, err)
				}
				if b, err := o.Verify(k.cfg.Keys.Cluster); err == nil && b.Client == c && b.Session == sess {
					k.mute.KeepOpen(c, sess, ttl, &o)
				}
			}
			return nil
		})
	}
	if err != nil {
		return fmt.Errorf("core: restoring votes: %w", err)
	}
	return nil
}

// restoreJustified puts a stored Ticket with its J back in justified if it
// is still the register's Ticket (or the Ticket of its Held) and J checks
// out; anything else is skipped: a J only helps resynchronisation.
func (k *Core) restoreJustified(key, v []byte) {
	var f wire.Forward
	if crypto.Unmarshal(v, &f) != nil {
		return
	}
	st, err := k.verify(&f.Statement)
	if err != nil || st.Phase != wire.PhaseTicket || string(key) != string(stmtKey(st.Lock, st.Client)) {
		return
	}
	lock := k.locks[st.Lock]
	if lock == nil {
		return
	}
	en := lock.Highest(st.Client)
	if en == nil || (en.St.Phase != wire.PhaseTicket && en.St.Phase != wire.PhaseHeld) ||
		en.St.Session != st.Session || en.St.Attempt != st.Attempt || en.St.N != st.N {
		return
	}
	if keys, q, views := k.keysForJ(f.J, k.anyJ()); bakery.CheckTicket(st, f.J, keys, q, k.verify, views) != nil {
		return
	}
	k.setJustified(regKey{st.Lock, st.Client}, justifiedTicket{ticket: f.Statement, j: f.J})
}

// restoreEntry decodes and verifies a stored signed statement.
func (k *Core) restoreEntry(v []byte) (*activeset.Entry, error) {
	var ss wire.SignedStatement
	if err := crypto.Unmarshal(v, &ss); err != nil {
		return nil, err
	}
	st, err := k.verify(&ss)
	if err != nil {
		return nil, err
	}
	return &activeset.Entry{Signed: ss, St: st}, nil
}

// restoredLock returns the lock called name, making it during a restore.
func (k *Core) restoredLock(name string) *activeset.Lock {
	lock := k.locks[name]
	if lock == nil {
		lock = activeset.NewLock(name)
		k.locks[name] = lock
	}
	return lock
}

func sortedKeys(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
