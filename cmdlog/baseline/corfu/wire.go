package corfu

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Wire format. Every request and reply body travels inside a pipe frame
// (which adds the request id). Integers are big-endian.
//
//	token request:  op=1 | u32 count                  reply: status | u64 first position
//	write request:  op=2 | u64 first | u32 count | count × (u32 len | data)
//	                                                  reply: status
//	read request:   op=3 | u64 position               reply: status | data
//
// A write request covers the consecutive positions first..first+count-1.
const (
	opToken byte = 1
	opWrite byte = 2
	opRead  byte = 3
)

// Reply statuses.
const (
	statusOK        byte = 0
	statusWritten   byte = 1 // a position of the write was already written (write-once)
	statusUnwritten byte = 2 // read of a position never written
	statusBad       byte = 3 // malformed or unexpected request
	statusStorage   byte = 4 // the replica's storage failed
)

// Limits on requests, checked before anything is allocated.
const (
	// MaxBatch is the largest number of records in one token or write
	// request.
	MaxBatch = 4096
	// maxRecord is the largest record accepted.
	maxRecord = 1 << 20
)

// Errors returned by the client; they wrap the replica's status.
var (
	// ErrWritten: a position was already written (Corfu's write-once rule).
	ErrWritten = errors.New("corfu: position already written")
	// ErrUnwritten: a read of a position that holds nothing.
	ErrUnwritten = errors.New("corfu: position not written")
	// ErrStorage: a replica's storage failed.
	ErrStorage = errors.New("corfu: replica storage failed")
	// ErrBadRequest: a node refused a request as malformed.
	ErrBadRequest = errors.New("corfu: bad request")
	// errMalformed: a message from the network does not decode.
	errMalformed = errors.New("corfu: malformed message")
)

func statusErr(s byte) error {
	switch s {
	case statusOK:
		return nil
	case statusWritten:
		return ErrWritten
	case statusUnwritten:
		return ErrUnwritten
	case statusStorage:
		return ErrStorage
	case statusBad:
		return ErrBadRequest
	}
	return fmt.Errorf("%w: unknown status %d", errMalformed, s)
}

func appendTokenRequest(dst []byte, count int) []byte {
	dst = append(dst, opToken)
	return binary.BigEndian.AppendUint32(dst, uint32(count))
}

func decodeTokenRequest(b []byte) (count int, err error) {
	if len(b) != 5 || b[0] != opToken {
		return 0, fmt.Errorf("%w: token request of %d bytes", errMalformed, len(b))
	}
	n := binary.BigEndian.Uint32(b[1:])
	if n == 0 || n > MaxBatch {
		return 0, fmt.Errorf("%w: token count %d", errMalformed, n)
	}
	return int(n), nil
}

func appendTokenReply(dst []byte, first uint64) []byte {
	dst = append(dst, statusOK)
	return binary.BigEndian.AppendUint64(dst, first)
}

func decodeTokenReply(b []byte) (first uint64, err error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("%w: empty token reply", errMalformed)
	}
	if err := statusErr(b[0]); err != nil {
		return 0, err
	}
	if len(b) != 9 {
		return 0, fmt.Errorf("%w: token reply of %d bytes", errMalformed, len(b))
	}
	first = binary.BigEndian.Uint64(b[1:])
	if first == 0 {
		return 0, fmt.Errorf("%w: token position 0", errMalformed)
	}
	return first, nil
}

func appendWriteRequest(dst []byte, first uint64, records [][]byte) []byte {
	dst = append(dst, opWrite)
	dst = binary.BigEndian.AppendUint64(dst, first)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(records)))
	for _, r := range records {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(r)))
		dst = append(dst, r...)
	}
	return dst
}

// decodeWriteRequest returns the first position and the records, which
// alias b.
func decodeWriteRequest(b []byte, records [][]byte) (first uint64, _ [][]byte, err error) {
	if len(b) < 13 || b[0] != opWrite {
		return 0, nil, fmt.Errorf("%w: write request of %d bytes", errMalformed, len(b))
	}
	first = binary.BigEndian.Uint64(b[1:])
	n := binary.BigEndian.Uint32(b[9:])
	if first == 0 || n == 0 || n > MaxBatch {
		return 0, nil, fmt.Errorf("%w: write of %d records at %d", errMalformed, n, first)
	}
	if first+uint64(n) < first {
		return 0, nil, fmt.Errorf("%w: write positions overflow", errMalformed)
	}
	b = b[13:]
	records = records[:0]
	for range n {
		if len(b) < 4 {
			return 0, nil, fmt.Errorf("%w: truncated record header", errMalformed)
		}
		size := binary.BigEndian.Uint32(b)
		b = b[4:]
		if size > maxRecord || uint64(size) > uint64(len(b)) {
			return 0, nil, fmt.Errorf("%w: record of %d bytes, %d left", errMalformed, size, len(b))
		}
		records = append(records, b[:size:size])
		b = b[size:]
	}
	if len(b) != 0 {
		return 0, nil, fmt.Errorf("%w: %d trailing bytes", errMalformed, len(b))
	}
	return first, records, nil
}

func appendReadRequest(dst []byte, pos uint64) []byte {
	dst = append(dst, opRead)
	return binary.BigEndian.AppendUint64(dst, pos)
}

func decodeReadRequest(b []byte) (pos uint64, err error) {
	if len(b) != 9 || b[0] != opRead {
		return 0, fmt.Errorf("%w: read request of %d bytes", errMalformed, len(b))
	}
	pos = binary.BigEndian.Uint64(b[1:])
	if pos == 0 {
		return 0, fmt.Errorf("%w: read of position 0", errMalformed)
	}
	return pos, nil
}
