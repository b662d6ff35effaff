package crypto

import (
	"errors"
	"fmt"
)

// Item budget. Decoding a one-byte CBOR null or empty map into a struct
// costs tens of bytes, so a frame of nested nulls would decode into fifty
// times its size (a 4 MiB frame into 220 MB). Our signed objects carry keys,
// signatures and hashes, about twenty bytes per data item; the densest
// legitimate message is a StatusReply of many short lock names (about four
// bytes per item), which the fixed allowance covers. So a frame may hold at
// most len/minBytesPerItem + itemAllowance items, and a flood of tiny items is
// refused before anything is allocated for it: the worst case left is about
// 550 K items for a 4 MiB frame, some 50 MB for a moment.
const (
	minBytesPerItem = 8
	itemAllowance   = 32768
)

// ErrTooManyItems is returned for input with more CBOR items than its size allows.
var ErrTooManyItems = errors.New("crypto: input has too many CBOR items for its size")

// checkItemBudget walks the CBOR heads of data (without decoding values) and
// fails if it holds more items than its budget, or is not well formed enough
// to walk. The full decoder checks everything else.
func checkItemBudget(data []byte) error {
	budget := len(data)/minBytesPerItem + itemAllowance
	items := 0
	pending := 1 // items still to read at the current level, summed over open containers
	i := 0
	for pending > 0 {
		if i >= len(data) {
			return nil // truncated: the decoder reports it
		}
		items++
		if items > budget {
			return fmt.Errorf("%w (more than %d in %d bytes)", ErrTooManyItems, budget, len(data))
		}
		pending--
		major, info := data[i]>>5, data[i]&0x1f
		i++
		var arg uint64
		switch {
		case info < 24:
			arg = uint64(info)
		case info <= 27:
			n := 1 << (info - 24)
			if i+n > len(data) {
				return nil
			}
			for _, b := range data[i : i+n] {
				arg = arg<<8 | uint64(b)
			}
			i += n
		default:
			return nil // indefinite or reserved: the decoder refuses it
		}
		switch major {
		case 2, 3: // byte and text strings: skip the payload
			if arg > uint64(len(data)-i) {
				return nil
			}
			i += int(arg)
		case 4: // array
			if arg > uint64(budget) {
				return fmt.Errorf("%w (an array of %d)", ErrTooManyItems, arg)
			}
			pending += int(arg)
		case 5: // map: keys and values
			if arg > uint64(budget)/2 {
				return fmt.Errorf("%w (a map of %d)", ErrTooManyItems, arg)
			}
			pending += 2 * int(arg)
		case 6: // tag: one item follows (the decoder refuses tags anyway)
			pending++
		}
		if pending > budget {
			return fmt.Errorf("%w (%d announced)", ErrTooManyItems, pending)
		}
	}
	return nil
}
