// Package store is the server's durable key-value store (docs/protocol.md §9): a
// bbolt file, made durable through a write-ahead log written by one
// goroutine with group commit.
//
// What the caller does, in order:
//
//  1. Open the file once per process. A second process (or a second Open in
//     this process) waiting longer than Options.LockTimeout for the file lock
//     gets ErrLocked; a damaged file gets an error matching ErrCorrupt and
//     ErrFailed, an *IntegrityError naming the file (and the bucket and key)
//     for what the store's own checks find. Neither is retried here.
//  2. Before sending any acknowledgement that depends on a record, Commit the
//     record and wait for Commit to return nil. nil means the ops are on
//     stable storage (their WAL record is written and fdatasync'd); they
//     survive kill -9 and power loss of the machine. Any error means "not
//     acknowledged": do not ack.
//  3. Read with Get and ForEach; they see every Commit that has returned nil,
//     and never a part of one Commit, and never a value that does not match
//     its tag.
//  4. Call Scrub in the background, a chunk at a time at the rate you
//     choose, and export its progress (see Scrub below).
//  5. Stop acting on the store at once when any call returns an error
//     matching ErrFailed (or Failed returns one): the store has failed for
//     good, and nothing more is acknowledged (see Failure).
//  6. Close once at shutdown; it fails queued Commits with ErrClosed, waits
//     for the batch in flight and applies everything to the bbolt file.
//
// # Files
//
// The bbolt file at path is the home of the data. Beside it, path + ".wal"
// (mode 0600) is the write-ahead log: a file of exactly Options.WALSize
// bytes, written out in full with zeros and fsync'd under a temporary name
// when it is created, then renamed into place (and the directory fsync'd),
// so that writing a record never allocates blocks or changes the file's
// size. One bbolt file lock covers both files. Open replaces a WAL of
// another size, after replaying it; it also replaces any WAL it finds when
// it creates the bbolt file (a WAL without its database is meaningless).
//
// A record is, little-endian: payload length n (u32), CRC-32C (u32) of the
// length, pass, seq and payload, pass (u64), seq (u64), payload (n bytes:
// the batch's ops in order, each a delete flag, then bucket, key and, for
// a put, value, each with a uvarint length). seq numbers records 1, 2, 3,
// ...; pass is a random non-zero id drawn each time the writer starts
// writing at offset 0. The first record of every pass is its marker: one
// put of "marker" in the bucket "store.wal", whose value is the bbolt
// file's applied and digest (below) when the pass began; it is applied to
// nothing. The bbolt bucket "store.wal" (reserved: ErrInvalid for callers)
// holds "applied": the seq of the last record whose ops are in the bbolt
// file, always written in the same bbolt transaction as those ops;
// "digest": the XOR of the tags of every value outside store.wal and their
// number, kept in step in the same transactions; and "format": 1, the mark
// of a sealed file.
//
// Every value in the bbolt file, store.wal's included, is stored sealed:
// value ‖ tag, the tag being the first 16 bytes of SHA-256 over
// "bq.store.seal.v1", the bucket and the key (each with its uvarint
// length) and the value (seal.go). Get and ForEach return the value
// without its tag.
//
// # Group commit
//
// One goroutine at a time writes the WAL (below, "the writer"). A Commit
// that finds nobody writing writes its own record on its own goroutine; a
// Commit that finds somebody writing joins a queue. When the leading Commit
// is done and the queue is not empty, it hands the writing to the writer
// goroutine, which takes every Commit queued at that moment (up to
// Options.MaxBatchOps ops and Options.MaxBatchBytes bytes), encodes them,
// in queue order, as one record, writes it (pwrite) at the current offset
// of the WAL and calls fdatasync once: one device flush serves them all;
// it repeats until the queue is empty. After a sync the record goes on the
// in-memory list of pending records and the Commits are answered. There is
// no timer: while a record is being synced, new Commits queue up and form
// the next batch, so batches grow with load, and a lone committer (the
// server's commit loop) pays one fdatasync and no goroutine switch.
//
// # Checkpoints
//
// A checkpoint applies every pending record, in order, to the bbolt file in
// one normal (fully synced) bbolt transaction that seals each value, keeps
// the digest in step and sets "applied" to the last one's seq, then drops
// them from memory. The checkpointer
// goroutine runs one every Options.CheckpointInterval and whenever the
// pending records pass a quarter of the WAL, so a Commit never waits for
// bbolt in the common case. Get, ForEach and Check run one first (readers
// are rare: start-up and tests), and so does Close. Replaying ops that are
// already applied is harmless: each key ends up with its last op either way.
//
// The writer appends records one after the other. When the next one does
// not fit before the end of the file, the writer runs a checkpoint itself
// and waits for it, so every record written so far is in bbolt, then starts
// a new pass: a fresh pass id, offset 0. Pending records therefore never
// take more than the WAL's size. A batch whose record would exceed half the
// WAL skips it: the writer checkpoints, then applies the batch directly in
// one synced bbolt transaction that also sets "applied" to the seq the
// record would have had, and starts a new pass.
//
// A pass's marker is written, and fdatasync'd, before the first record of
// the pass, by the writer, at offset 0: no record of a pass is ever on the
// disk without its marker before it. The state it describes is on stable
// storage before it: a pass begins after a synced bbolt transaction (the
// checkpoint of a wrap, a large batch's) or at Open, which syncs the bbolt
// file; and until the marker is written nothing changes the file, as
// nothing is pending.
//
// # Recovery
//
// Open, before the writer starts:
//
//  1. reads the whole WAL and takes the chain of valid records from offset
//     0: a record is valid if its length fits in the file and its CRC
//     matches, and each one after the first must directly follow the
//     previous one, carry the same pass id and seq previous+1;
//  2. seals a bbolt file without the format mark (see Integrity);
//  3. checks the bbolt file as a whole: the tag of every value, the digest
//     recomputed against the one stored, and bbolt's own check;
//  4. checks the bbolt file against the WAL (the marker) and the WAL
//     against itself (a chain that ends early): see Integrity;
//  5. applies the chain's records with seq > applied (but its marker), with
//     the new "applied", in one synced bbolt transaction;
//  6. fdatasyncs the bbolt file; the writer then starts a new pass at
//     offset 0 with seq max(applied, last seq)+1, whose marker it writes
//     with its first record.
//
// Why no acknowledged record is lost: a record is acknowledged only after
// its fdatasync, and is written only at the end of the current pass's
// chain, so the chain from offset 0 reaches it; until a pass ends, nothing
// overwrites a record of it, and a pass ends (wrap, large batch or Open)
// only once every record written before is in bbolt (durably: the
// checkpoint's bbolt transaction was synced). Why nothing else is replayed:
// a torn or partly written record fails its CRC (and a zeroed region fails
// the length check), and the chain stops there; bytes beyond the chain end
// are either zeros, a record of an older pass (different pass id; its
// seqs are older too), or the remains of a failed or overwritten record
// (see below). Records, or parts of them, carrying user-supplied bytes can
// look like records, but only bytes with the current pass id, a random
// 64-bit value that is never exposed, and a matching CRC are taken. Records
// of an older pass are all applied already, even when the chain of a new
// pass is torn at offset 0 and the older chain is scanned instead. A large
// batch spends a seq, so a record left by a failed write, which has that
// seq, is never replayed over the batch.
//
// # Integrity
//
// The rules of docs/protocol.md change 69: what vouches for what the store
// reads from its own disk.
//
//   - (1) The tag vouches for a value under its bucket and key: a flipped
//     bit, a value written under another key or bucket (a misdirected
//     write) or cut short fails it. Open checks every tag, and so do Get,
//     ForEach, Check and Scrub on everything they read.
//   - (2) The digest vouches for the file as the last transaction left it:
//     a page that a lost write left stale holds an older version of its
//     values, whose tags verify, but the recomputed digest (or the number
//     of values) differs from the stored one. Each put takes out the tag of
//     the value it replaces, as stored, and puts in the new one's; a delete
//     takes out the old one's (digest.go).
//   - bbolt's own check, at Open, vouches for the routes of lookups: a
//     damaged key in a branch page sends Get to a leaf that lacks a key that
//     exists, and no tag is read to say so.
//   - (3) The marker at the start of the WAL's chain vouches that the bbolt
//     file is not older than the WAL says: Open refuses a file whose applied
//     is below the marker's (a lost write of bbolt's meta page, an old copy
//     put back) or equal with another digest. A chain with records not in
//     bbolt must begin with a marker; a marker inside a chain is damage.
//   - (4) A chain that ends early is damage, not a torn tail. Records of a
//     pass are written one after the other, each fdatasync'd before the
//     next is written, so a crash tears at most the last; after the chain's
//     last record, a valid record of its pass with a higher seq anywhere
//     further in the WAL means that a record in between was damaged. The
//     candidates are found by the pass id at offset 8 of a header
//     (bytes.Index), in the one read of the WAL at Open. The marker at
//     offset 0 may itself be damaged (or torn by a crash while it was
//     written, when no record of its pass existed yet), and the chain is
//     empty; or its write may be lost, which leaves there the marker of the
//     pass before, of the same size, and the chain is that old marker
//     alone. So the pass ids in the headers at offset 0 and right after a
//     marker are candidates too, unless they are the chain's, and a valid
//     record of theirs not in bbolt is damage (every record of an earlier
//     pass is in bbolt: a pass begins only then). A record
//     left behind the chain by a failed write is not taken for damage: a
//     write that fails for lack of space is overwritten by the next record,
//     at the same offset and seq, which destroys its header; a write that
//     fails otherwise fails the store, and the record is the chain's last.
//
// What a disk can still do undetected: lose an fdatasync'd WAL record
// together with every later one, or damage the chain's last record (which
// cannot be told from one torn by a crash, and is dropped), before a
// checkpoint has applied it: the chain simply ends earlier, as
// after a crash before the ack; and change bytes in a way that keeps a
// 128-bit tag.
//
// A bbolt file written before change 69 has no format mark. Its first Open
// seals it, before anything else is read from it: every value gets its
// tag and the digest is computed, in one synced transaction (migrate.go;
// Stats.Sealed counts the values). A sealed file that lost its format mark
// is refused, not sealed again: its store.wal holds more than an 8-byte
// "applied", or its WAL begins with a marker.
//
// Scrub (rule 6) reads the whole bbolt file again and again, a chunk of at
// most the values the caller asks for per call, each chunk in a read
// transaction of its own, resuming after the last key checked: every
// value once a pass. It checks every tag, and a bad one fails the store.
// At the end of a pass it also compares the digest of the values it saw
// with the stored one, but only if the bbolt file had no write transaction
// (no checkpoint or large batch committed) during the whole pass: chunks
// of different versions of the file do not add up to the digest of any.
// A store under steady writes may therefore never have its digest checked
// by the scrub; Open checks it in any case. Scrub reads the bbolt file
// only: Commits still only in the WAL are checked once applied.
//
// # Failure
//
// The store fails for good (ErrFailed) when it finds damage (an
// *IntegrityError: Open, a read, Check, Scrub or a checkpoint finding a
// value that does not match its tag), when an fdatasync fails (of the WAL
// or of bbolt's file: never retried, whatever its errno; after a failed
// fsync the kernel may have dropped the pages, and a second one may report
// success), or when a write or read fails with an I/O error other than a
// lack of space (ENOSPC, EDQUOT on a write). From then on every Commit,
// Get, ForEach, Check and Scrub returns an error matching ErrFailed; the
// checkpointer stops; Failed returns the first cause; nothing more is
// written to either file (Close checkpoints nothing and returns the
// failure). Records acknowledged before stay in the WAL and the next Open
// replays them, after checking the files afresh. The caller (the server)
// stops acting on the store at once: it counts as crashed.
//
// The Commit whose WAL record was written when the store failed (its
// fdatasync failed, or its write failed otherwise than for lack of space:
// a failed store never overwrites the record, and Open replays it if its
// bytes landed whole), or whose large batch's bbolt transaction failed
// after its meta page was written, returns an error that also matches
// ErrUncertain: the ops were not acknowledged but may survive; treat them
// like a record persisted just before a crash, before its ack was sent.
// Every other failed Commit applied nothing.
//
// A write that finds no space is no failure of the data. The batch fails
// with the error, acknowledging none of its Commits; the writer's position
// in the WAL does not move, so the next record overwrites the failed one
// (a shorter one leaves a tail that fails the CRC or pass/seq check). The
// store stays usable, and a later Commit succeeds once space is freed. A
// checkpoint that finds no space (the bbolt file grows) is logged and
// retried; its records stay pending, in memory and in the WAL, so they are
// still durable. Commits go on succeeding while the WAL has room. Once it
// has none, the writer's own checkpoint fails and the batch fails with
// that error ("store: WAL full, checkpoint failed: ..."). Get, ForEach and
// Check fail too while pending records cannot be applied, and Close
// reports it (the next Open replays them). Nothing acknowledged is lost,
// and everything works again once space is freed.
//
// # Cancellation
//
// A Commit whose ctx ends while it is still queued is removed from the
// queue and returns ctx.Err(); its ops are never applied. Once the writer
// has taken it into a batch, Commit waits for that batch and returns its
// outcome, whatever ctx does (a batch is bounded by MaxBatchOps and
// MaxBatchBytes).
package store
