//go:build !js

package lineage

// EncodeRangeInfo encodes info, its shard and first tick included and
// covered by its checksum, for a Store that keeps the descriptions of its
// ranges apart from them (as the NATS store does).
func EncodeRangeInfo(info RangeInfo) []byte {
	return append(pebRangeKey(0, info.Shard, info.FirstTick)[1:], appendInfo(nil, info)...)
}

// DecodeRangeInfo decodes what EncodeRangeInfo encoded, or returns an
// error wrapping ErrCorrupt.
func DecodeRangeInfo(b []byte) (RangeInfo, error) {
	const head = pebKeyLen - 1 // shard and first tick
	if len(b) < head {
		return RangeInfo{}, ErrCorrupt
	}
	key := make([]byte, pebKeyLen)
	copy(key[1:], b[:head])
	return decodeInfo(key, b[head:])
}
