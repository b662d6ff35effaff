package crypto

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/fxamacker/cbor/v2"
)

// Limits on what a decoder accepts from a peer (docs/protocol.md §8).
const (
	// MaxMessageSize caps one encoded wire message (and so every byte string in it).
	MaxMessageSize = 4 << 20
	// MaxArrayElements caps every CBOR array: members of a view, votes in a
	// certificate, views in a justification.
	MaxArrayElements = 1 << 14
	// MaxMapPairs caps every CBOR map; our maps are structs with few fields.
	MaxMapPairs = 32
	// MaxNesting caps CBOR nesting depth.
	MaxNesting = 16
)

var (
	encMode cbor.EncMode
	decMode cbor.DecMode
	// frameMode is decMode that ignores map keys it does not know: unsigned
	// frames may carry fields a newer minor version added (docs/protocol.md
	// §1, "Versions"). Signed bodies never use it.
	frameMode cbor.DecMode
)

func init() {
	var err error
	encMode, err = cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err)
	}
	strict := cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
		MaxNestedLevels:   MaxNesting,
		MaxArrayElements:  MaxArrayElements,
		MaxMapPairs:       MaxMapPairs,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		UTF8:              cbor.UTF8RejectInvalid,
		FieldNameMatching: cbor.FieldNameMatchingCaseSensitive,
	}
	if decMode, err = strict.DecMode(); err != nil {
		panic(err)
	}
	tolerant := strict
	tolerant.ExtraReturnErrors = cbor.ExtraDecErrorNone
	if frameMode, err = tolerant.DecMode(); err != nil {
		panic(err)
	}
}

// ErrOversize is returned for input larger than MaxMessageSize.
var ErrOversize = errors.New("crypto: input exceeds the maximum message size")

// Marshal encodes v as deterministic (core deterministic) CBOR.
func Marshal(v any) ([]byte, error) {
	b, err := encMode.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("crypto: encode: %w", err)
	}
	return b, nil
}

// Unmarshal strictly decodes data into v: it rejects input over
// MaxMessageSize, more CBOR items than its size allows (see budget.go),
// duplicate map keys, indefinite lengths, tags, unknown
// fields, invalid UTF-8 and trailing bytes.
func Unmarshal(data []byte, v any) error { return unmarshal(decMode, data, v) }

func unmarshal(mode cbor.DecMode, data []byte, v any) error {
	if len(data) > MaxMessageSize {
		return ErrOversize
	}
	if err := checkItemBudget(data); err != nil {
		return err
	}
	if err := mode.Unmarshal(data, v); err != nil {
		return fmt.Errorf("crypto: decode: %w", err)
	}
	return nil
}

// UnmarshalFrame is Unmarshal for an unsigned frame: a map key it does not
// know is skipped (a field or a message kind of a newer minor version),
// everything else is as strict.
func UnmarshalFrame(data []byte, v any) error { return unmarshal(frameMode, data, v) }

// UnmarshalCanonical is Unmarshal plus a check that data is the one
// deterministic encoding of the decoded value. Signed bodies are decoded with
// it, so equal statements always have equal bytes and a signer cannot mint
// many byte-different copies of one statement.
func UnmarshalCanonical(data []byte, v any) error {
	if err := Unmarshal(data, v); err != nil {
		return err
	}
	again, err := encMode.Marshal(v)
	if err != nil {
		return fmt.Errorf("crypto: re-encode: %w", err)
	}
	if !bytes.Equal(again, data) {
		return errors.New("crypto: decode: body is not in deterministic CBOR form")
	}
	return nil
}
