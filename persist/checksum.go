package persist

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Every value in the file ends with a CRC-32C of the key and the value before
// it (format 2, SchemaVersion). Index entries, whose value was empty, hold
// just the checksum of their key. A value is verified on every read, and the
// scrub at Open (scrubTx) verifies every one, so a flipped byte in a value or
// a key is an error naming the file, never a different answer. bbolt's own
// checksums cover only its meta pages.
const sumLen = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(key, payload []byte) uint32 {
	return crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, payload)
}

// seal writes the checksum of key and v[:len(v)-sumLen] into v's last bytes.
func seal(key, v []byte) []byte {
	n := len(v) - sumLen
	binary.BigEndian.PutUint32(v[n:], checksum(key, v[:n]))
	return v
}

// unseal verifies a sealed value read from bucket and returns its payload.
// v == nil (absent) is returned as nil.
func (s *Store) unseal(bucket, key, v []byte) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	p, ok := unsealed(key, v)
	if !ok {
		return nil, s.corrupt(bucket, key)
	}
	return p, nil
}

func unsealed(key, v []byte) ([]byte, bool) {
	if len(v) < sumLen {
		return nil, false
	}
	n := len(v) - sumLen
	if binary.BigEndian.Uint32(v[n:]) != checksum(key, v[:n]) {
		return nil, false
	}
	return v[:n:n], true
}

// corrupt is the error for a value whose checksum does not match.
func (s *Store) corrupt(bucket, key []byte) error {
	path := "fsm database"
	if s != nil {
		path = s.path
	}
	return fmt.Errorf("%s: %w: checksum mismatch in bucket %q at key %q", path, ErrCorrupt, bucket, key)
}
