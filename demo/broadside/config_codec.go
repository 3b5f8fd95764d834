package broadside

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// GameName names the game in recordings (bsr.Header.Game): a recording
// whose game is not this one is not a Broadside match.
const GameName = "broadside"

// SchemaVersion is the version of the game's rules, command encoding and
// state tables, recorded with every match (bsr.Header.SchemaVersion): a
// recording re-simulated under another version may diverge. Raise it
// whenever a change alters what a log produces.
const SchemaVersion = 1

// ErrBadConfig is wrapped by UnmarshalBinary errors.
var ErrBadConfig = errors.New("broadside: bad encoded config")

// Encoded Config (integers little-endian, 40 bytes):
//
//	magic "BSCF" | version u8 = 1 | reserved u8 × 3 = 0
//	seed u64 | width i32 | height i32 | sectors x u16 | sectors y u16
//	islands u32 | max players u32 | max balls per sector u32
const (
	configMagic      = "BSCF"
	configVersion    = 1
	configEncodedLen = 40
)

// MarshalBinary encodes c (encoding.BinaryMarshaler), as recordings keep
// it (bsr.Header.GameConfig). It fails for a config that does not
// validate.
func (c Config) MarshalBinary() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Islands < 0 || c.MaxPlayers < 0 || c.MaxBallsPerSector < 0 {
		return nil, fmt.Errorf("broadside: negative config field in %+v", c)
	}
	le := binary.LittleEndian
	b := make([]byte, 0, configEncodedLen)
	b = append(b, configMagic...)
	b = append(b, configVersion, 0, 0, 0)
	b = le.AppendUint64(b, c.Seed)
	b = le.AppendUint32(b, uint32(c.Width))
	b = le.AppendUint32(b, uint32(c.Height))
	b = le.AppendUint16(b, uint16(c.SectorsX))
	b = le.AppendUint16(b, uint16(c.SectorsY))
	b = le.AppendUint32(b, uint32(c.Islands))
	b = le.AppendUint32(b, uint32(c.MaxPlayers))
	b = le.AppendUint32(b, uint32(c.MaxBallsPerSector))
	return b, nil
}

// UnmarshalBinary decodes an encoded Config and validates it
// (encoding.BinaryUnmarshaler). It never panics; on error c is unchanged
// and the error wraps ErrBadConfig.
func (c *Config) UnmarshalBinary(b []byte) error {
	if len(b) != configEncodedLen {
		return fmt.Errorf("%w: %d bytes, want %d", ErrBadConfig, len(b), configEncodedLen)
	}
	if string(b[:4]) != configMagic {
		return fmt.Errorf("%w: magic %q", ErrBadConfig, b[:4])
	}
	if b[4] != configVersion || b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return fmt.Errorf("%w: version %d", ErrBadConfig, b[4])
	}
	le := binary.LittleEndian
	u32 := func(off int) (int, error) {
		v := le.Uint32(b[off:])
		if v > math.MaxInt32 {
			return 0, fmt.Errorf("%w: field at byte %d is %d", ErrBadConfig, off, v)
		}
		return int(v), nil
	}
	d := Config{
		Seed:     le.Uint64(b[8:]),
		Width:    int32(le.Uint32(b[16:])),
		Height:   int32(le.Uint32(b[20:])),
		SectorsX: int(le.Uint16(b[24:])),
		SectorsY: int(le.Uint16(b[26:])),
	}
	var err error
	if d.Islands, err = u32(28); err != nil {
		return err
	}
	if d.MaxPlayers, err = u32(32); err != nil {
		return err
	}
	if d.MaxBallsPerSector, err = u32(36); err != nil {
		return err
	}
	if err := d.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	*c = d
	return nil
}
