package wire

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"

	"github.com/bq-lock/bq/crypto"
)

// Encode encodes m as deterministic CBOR. It refuses a message without
// exactly one body, so a bug cannot put an ambiguous frame on the wire.
func Encode(m *Message) ([]byte, error) {
	if m.Body() == nil {
		return nil, errors.New("wire: message must have exactly one body")
	}
	b, err := crypto.Marshal(m)
	if err != nil {
		return nil, err
	}
	if len(b) > crypto.MaxMessageSize {
		return nil, fmt.Errorf("wire: message of %d bytes exceeds the limit of %d", len(b), crypto.MaxMessageSize)
	}
	return b, nil
}

// ErrUnknownKind: a frame holds no message kind this version knows, only
// kinds it does not (a newer minor version's, §1 "Versions"). It is not bad
// input: the receiver skips the frame and keeps the connection.
var ErrUnknownKind = errors.New("wire: a message of a kind this version does not know")

// Decode decodes one frame and checks its shape (Validate). It never panics;
// every failure is an error prefixed "wire:" or "crypto:". Map keys it does
// not know are skipped (fields a newer minor version added); a frame with no
// kind it knows but some it does not is ErrUnknownKind. Signed bodies inside
// are decoded strictly when they are verified: see verify.go.
func Decode(data []byte) (*Message, error) {
	var m Message
	if err := crypto.UnmarshalFrame(data, &m); err != nil {
		return nil, err
	}
	if m.Body() == nil {
		var keys map[uint64]cbor.RawMessage
		if crypto.UnmarshalFrame(data, &keys) == nil && len(keys) > 0 && m.kinds() == 0 {
			return nil, ErrUnknownKind
		}
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Validate checks the shape of a decoded message: exactly one body, and every
// field within its bounds. It does not check signatures.
func (m *Message) Validate() error {
	if m.Body() == nil {
		return errors.New("wire: message must have exactly one body")
	}
	switch {
	case m.Challenge != nil:
		if len(m.Challenge.Nonce) != NonceSize {
			return fmt.Errorf("wire: challenge nonce has %d bytes, want %d", len(m.Challenge.Nonce), NonceSize)
		}
	case m.Hello != nil:
		if _, err := m.Hello.Key.Parse(); err != nil {
			return fmt.Errorf("wire: hello: %w", err)
		}
	case m.Submit != nil:
		return checkSignedStatement(m.Submit.Statement)
	case m.MembersReply != nil:
		return checkLock(m.MembersReply.Lock)
	case m.Listen != nil:
		return checkLock(m.Listen.Lock)
	case m.GetSet != nil:
		return checkLock(m.GetSet.Lock)
	case m.Update != nil:
		return checkLock(m.Update.Lock)
	case m.Read != nil:
		return checkLock(m.Read.Lock)
	case m.Error != nil:
		if len(m.Error.Detail) > MaxDetail {
			return fmt.Errorf("wire: error detail of %d bytes exceeds %d", len(m.Error.Detail), MaxDetail)
		}
		if l := m.Error.Limit; l != nil && len(l.Name) > MaxLimitName {
			return fmt.Errorf("wire: limit name of %d bytes exceeds %d", len(l.Name), MaxLimitName)
		}
	case m.Forward != nil:
		return checkSignedStatement(m.Forward.Statement)
	case m.Announce != nil:
		if len(m.Announce.Items) > MaxAnnounceItems {
			return fmt.Errorf("wire: announce of %d items exceeds %d", len(m.Announce.Items), MaxAnnounceItems)
		}
		for i := range m.Announce.Items {
			if err := checkLock(m.Announce.Items[i].Lock); err != nil {
				return err
			}
		}
	case m.EpochNews != nil:
		if n := len(m.EpochNews.Epochs); n == 0 || n > MaxEpochNews {
			return fmt.Errorf("wire: epoch news of %d epochs (1 to %d)", n, MaxEpochNews)
		}
		if len(m.EpochNews.Endorsements) > len(m.EpochNews.Epochs) {
			return fmt.Errorf("wire: epoch news with endorsements of %d epochs for %d epochs", len(m.EpochNews.Endorsements), len(m.EpochNews.Epochs))
		}
		for _, es := range m.EpochNews.Endorsements {
			if len(es) > MaxEndorsements {
				return fmt.Errorf("wire: %d endorsements of one epoch (the limit is %d)", len(es), MaxEndorsements)
			}
		}
	case m.Endorse != nil:
		if len(m.Endorse.Endorsements) > MaxEndorsements {
			return fmt.Errorf("wire: %d endorsements of one epoch (the limit is %d)", len(m.Endorse.Endorsements), MaxEndorsements)
		}
	case m.Copy != nil:
		return m.Copy.check()
	case m.Status != nil:
		if m.Status.Lock != "" {
			return checkLock(m.Status.Lock)
		}
	case m.Evidence != nil:
		if m.Evidence.Kind != EvidenceInvalidTicket && m.Evidence.Kind != EvidenceEquivocation {
			return fmt.Errorf("wire: unknown evidence kind %d", m.Evidence.Kind)
		}
		if err := checkSignedStatement(m.Evidence.A); err != nil {
			return err
		}
		if m.Evidence.B != nil {
			return checkSignedStatement(*m.Evidence.B)
		}
	}
	return nil
}

func checkSignedStatement(s SignedStatement) error {
	if len(s.Signed.Body) == 0 || len(s.Signed.Sig) == 0 {
		return errors.New("wire: statement without body or signature")
	}
	return nil
}

// CheckLockName reports whether name is a valid lock name: 1..MaxLockName
// bytes of UTF-8 without control characters.
func CheckLockName(name string) error { return checkLock(name) }

func checkLock(name string) error {
	if name == "" {
		return errors.New("wire: empty lock name")
	}
	if len(name) > MaxLockName {
		return fmt.Errorf("wire: lock name of %d bytes exceeds %d", len(name), MaxLockName)
	}
	if !utf8.ValidString(name) {
		return errors.New("wire: lock name is not UTF-8")
	}
	for _, r := range name {
		if unicode.IsControl(r) { // C0, DEL and C1 (U+0080–U+009F, e.g. NEL)
			return errors.New("wire: lock name contains a control character")
		}
	}
	return nil
}
