package bsr

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/anoptic/broadside/cmdlog/msg"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// A signed recording makes its command log tamper-evident: the recorder
// keeps an RFC 6962 Merkle tree (golang.org/x/mod/sumdb/tlog) over the
// world's log entries in log order, from position 1, and signs a
// checkpoint of it (a golang.org/x/mod/sumdb/note signed note: world,
// tree size, root hash, tick) after every commands chunk, so at least every
// five seconds of match time, and at the end. A verifier holding the
// server's verifier key recomputes the tree from the recorded entries and
// checks every checkpoint against it (VerifySigned): an added, dropped,
// reordered or changed entry changes the root. A recording that starts
// after the world's start (a later segment, a tick range) carries the
// hashes of the tree of the entries before it (KindTree), so its roots are
// the world's, and consistency proofs from earlier segments' checkpoints.

// ErrSignature is wrapped by every error of VerifySigned about a recording
// whose log does not match its signed checkpoints (or has none).
var ErrSignature = errors.New("bsr: signed log check failed")

// GenerateKey returns a new ed25519 note signer key and its verifier key
// (the sumdb/note text encodings) for a server named name.
func GenerateKey(name string) (signerKey, verifierKey string, err error) {
	return note.GenerateKey(rand.Reader, name)
}

// NewSigner decodes a signer key made by GenerateKey.
func NewSigner(signerKey string) (note.Signer, error) {
	s, err := note.NewSigner(strings.TrimSpace(signerKey))
	if err != nil {
		return nil, fmt.Errorf("bsr: signer key: %w", err)
	}
	return s, nil
}

// NewVerifier decodes a verifier key made by GenerateKey.
func NewVerifier(verifierKey string) (note.Verifier, error) {
	v, err := note.NewVerifier(strings.TrimSpace(verifierKey))
	if err != nil {
		return nil, fmt.Errorf("bsr: verifier key: %w", err)
	}
	return v, nil
}

// Checkpoint is a signed statement of the world's log tree: after the
// marker of Tick (at log position Pos) the log's first Size entries hash
// to Root.
type Checkpoint struct {
	World uint32
	Tick  uint64
	Pos   uint64
	Size  int64
	Root  tlog.Hash
	// Final marks the checkpoint written at the end of the recording: a
	// recording whose last checkpoint is not final was cut.
	Final bool
}

// checkpointText is a checkpoint's note text.
func (c Checkpoint) text() string {
	final := ""
	if c.Final {
		final = " final"
	}
	return fmt.Sprintf("broadside world %d\n%d\n%s\ntick %d pos %d%s\n", c.World, c.Size, c.Root, c.Tick, c.Pos, final)
}

// parseCheckpoint parses a checkpoint's note text.
func parseCheckpoint(text string) (Checkpoint, error) {
	var c Checkpoint
	lines := strings.Split(text, "\n")
	if len(lines) != 5 || lines[4] != "" {
		return c, fmt.Errorf("checkpoint of %d lines", len(lines))
	}
	w, ok := strings.CutPrefix(lines[0], "broadside world ")
	world, err := strconv.ParseUint(w, 10, 32)
	if !ok || err != nil {
		return c, fmt.Errorf("checkpoint origin %q", lines[0])
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 {
		return c, fmt.Errorf("checkpoint tree size %q", lines[1])
	}
	root, err := tlog.ParseHash(lines[2])
	if err != nil {
		return c, fmt.Errorf("checkpoint root %q", lines[2])
	}
	var tick, pos uint64
	tl, final := strings.CutSuffix(lines[3], " final")
	if n, err := fmt.Sscanf(tl, "tick %d pos %d", &tick, &pos); n != 2 || err != nil {
		return c, fmt.Errorf("checkpoint tick line %q", lines[3])
	}
	c = Checkpoint{World: uint32(world), Tick: tick, Pos: pos, Size: size, Root: root, Final: final}
	if c.text() != text {
		return Checkpoint{}, fmt.Errorf("checkpoint text not in canonical form")
	}
	return c, nil
}

// leafHash is the Merkle leaf hash of a log entry: its position, record
// id and data.
func leafHash(e msg.Entry) tlog.Hash {
	var b [24]byte
	binary.LittleEndian.PutUint64(b[:], e.Pos)
	binary.LittleEndian.PutUint64(b[8:], e.Record.ID.Client)
	binary.LittleEndian.PutUint64(b[16:], e.Record.ID.Seq)
	return tlog.RecordHash(append(b[:], e.Record.Data...))
}

// logTree is an append-only Merkle tree in memory: the stored hashes (see
// tlog.StoredHashes) of the leaves from base on, and, for the leaves
// before base, only the hashes of the complete subtrees that cover them.
type logTree struct {
	n       int64 // leaves
	first   int64 // stored-hash index of leaf base
	dense   []tlog.Hash
	prefix  map[int64]tlog.Hash
	scratch []tlog.Hash
}

// newLogTree returns a tree of base leaves given by their frontier
// (frontierOf(base) order).
func newLogTree(base int64, frontier []tlog.Hash) (*logTree, error) {
	idx := frontierIndexes(base)
	if len(idx) != len(frontier) {
		return nil, fmt.Errorf("tree of %d leaves has %d subtrees, %d given", base, len(idx), len(frontier))
	}
	t := &logTree{n: base, first: tlog.StoredHashIndex(0, base), prefix: map[int64]tlog.Hash{}}
	for i, x := range idx {
		t.prefix[x] = frontier[i]
	}
	return t, nil
}

// frontierIndexes returns the stored-hash indexes of the complete subtrees
// that cover the first n leaves, largest first.
func frontierIndexes(n int64) []int64 {
	var out []int64
	var start int64
	for level := 62; level >= 0; level-- {
		if n&(1<<level) != 0 {
			out = append(out, tlog.StoredHashIndex(level, start>>level))
			start += 1 << level
		}
	}
	return out
}

// ReadHashes implements tlog.HashReader.
func (t *logTree) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		switch h, ok := t.prefix[x]; {
		case ok:
			out[i] = h
		case x >= t.first && x-t.first < int64(len(t.dense)):
			out[i] = t.dense[x-t.first]
		default:
			return nil, fmt.Errorf("tree hash %d not held (tree of %d leaves from %d)", x, t.n, t.first)
		}
	}
	return out, nil
}

// add appends a leaf.
func (t *logTree) add(leaf tlog.Hash) error {
	hs, err := tlog.StoredHashesForRecordHash(t.n, leaf, t)
	if err != nil {
		return err
	}
	t.dense = append(t.dense, hs...)
	t.n++
	return nil
}

// prune forgets every hash but those of the complete subtrees covering the
// tree: appends and the root of the whole tree need no other, so memory
// stays bounded however long the log (roots of earlier sizes and proofs
// from them are then no longer available).
func (t *logTree) prune() error {
	idx := frontierIndexes(t.n)
	hs, err := t.ReadHashes(idx)
	if err != nil {
		return err
	}
	clear(t.prefix)
	for i, x := range idx {
		t.prefix[x] = hs[i]
	}
	t.dense, t.first = t.dense[:0], tlog.StoredHashIndex(0, t.n)
	return nil
}

// root returns the root hash of the first n leaves.
func (t *logTree) root(n int64) (tlog.Hash, error) { return tlog.TreeHash(n, t) }

// frontier returns the hashes of the complete subtrees covering the tree.
func (t *logTree) frontier() ([]tlog.Hash, error) { return t.ReadHashes(frontierIndexes(t.n)) }

// TreeLink proves that an earlier checkpoint's tree (Size, Root) is a
// prefix of the tree a recording starts from.
type TreeLink struct {
	Size  int64
	Root  tlog.Hash
	Proof tlog.TreeProof
}

// treeBase is a KindTree chunk's payload.
type treeBase struct {
	Size     int64
	Frontier []tlog.Hash
	Links    []TreeLink
}

const maxTreeLinks = 64

func appendTreeBase(b []byte, tb *treeBase) []byte {
	b = binary.AppendUvarint(b, uint64(tb.Size))
	for _, h := range tb.Frontier {
		b = append(b, h[:]...)
	}
	b = binary.AppendUvarint(b, uint64(len(tb.Links)))
	for _, l := range tb.Links {
		b = binary.AppendUvarint(b, uint64(l.Size))
		b = append(b, l.Root[:]...)
		b = binary.AppendUvarint(b, uint64(len(l.Proof)))
		for _, h := range l.Proof {
			b = append(b, h[:]...)
		}
	}
	return b
}

func decodeTreeBase(raw []byte, c *chunkRef) (*treeBase, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: "+format, append([]any{ErrCorrupt, c.describe()}, args...)...)
	}
	uv := func() (uint64, bool) {
		x, k := binary.Uvarint(raw)
		if k <= 0 {
			return 0, false
		}
		raw = raw[k:]
		return x, true
	}
	hashes := func(n int) ([]tlog.Hash, bool) {
		if n > len(raw)/tlog.HashSize {
			return nil, false
		}
		out := make([]tlog.Hash, n)
		for i := range out {
			copy(out[i][:], raw[:tlog.HashSize])
			raw = raw[tlog.HashSize:]
		}
		return out, true
	}
	size, ok := uv()
	if !ok || size > 1<<62 || size != c.Aux2 {
		return nil, fail("tree size %d (header %d)", size, c.Aux2)
	}
	tb := &treeBase{Size: int64(size)}
	if tb.Frontier, ok = hashes(bits.OnesCount64(size)); !ok {
		return nil, fail("frontier cut")
	}
	nl, ok := uv()
	if !ok || nl > maxTreeLinks {
		return nil, fail("%d links", nl)
	}
	for i := range nl {
		ls, ok := uv()
		if !ok || ls > size {
			return nil, fail("link %d of size %d beyond %d", i, ls, size)
		}
		l := TreeLink{Size: int64(ls)}
		if len(raw) < tlog.HashSize {
			return nil, fail("link %d cut", i)
		}
		copy(l.Root[:], raw)
		raw = raw[tlog.HashSize:]
		np, ok := uv()
		if !ok || np > 128 {
			return nil, fail("link %d proof of %d hashes", i, np)
		}
		hs, ok := hashes(int(np))
		if !ok {
			return nil, fail("link %d proof cut", i)
		}
		l.Proof = hs
		tb.Links = append(tb.Links, l)
	}
	if len(raw) != 0 {
		return nil, fail("%d trailing bytes", len(raw))
	}
	return tb, nil
}

// maxNote bounds a checkpoint chunk's signed note.
const maxNote = 16 << 10

// openCheckpoint decodes a checkpoint chunk's signed note with verifier v
// (nil: only the text is decoded, its signatures are not checked).
func openCheckpoint(raw []byte, c *chunkRef, v note.Verifier) (Checkpoint, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: "+format, append([]any{ErrCorrupt, c.describe()}, args...)...)
	}
	if len(raw) > maxNote {
		return Checkpoint{}, fail("note of %d bytes", len(raw))
	}
	var text string
	if v == nil {
		i := strings.Index(string(raw), "\n\n")
		if i < 0 {
			return Checkpoint{}, fail("not a signed note")
		}
		text = string(raw[:i+1])
	} else {
		n, err := note.Open(raw, note.VerifierList(v))
		if err != nil {
			var une *note.UnverifiedNoteError
			if errors.As(err, &une) && len(une.Note.UnverifiedSigs) > 0 {
				var by []string
				for _, sig := range une.Note.UnverifiedSigs {
					by = append(by, sig.Name)
				}
				return Checkpoint{}, fmt.Errorf("%w: %s: not signed by %s (signed by %s)", ErrSignature, c.describe(), v.Name(), strings.Join(by, ", "))
			}
			return Checkpoint{}, fmt.Errorf("%w: %s: %v", ErrSignature, c.describe(), err)
		}
		text = n.Text
	}
	cp, err := parseCheckpoint(text)
	if err != nil {
		return Checkpoint{}, fail("%v", err)
	}
	if cp.Tick != c.First || cp.Pos != c.Aux1 || uint64(cp.Size) != c.Aux2 {
		return Checkpoint{}, fail("note says tick %d pos %d size %d", cp.Tick, cp.Pos, cp.Size)
	}
	return cp, nil
}

// signCheckpoint returns cp as a note signed by s.
func signCheckpoint(cp Checkpoint, s note.Signer) ([]byte, error) {
	b, err := note.Sign(&note.Note{Text: cp.text()}, s)
	if err != nil {
		return nil, fmt.Errorf("bsr: sign checkpoint at tick %d: %w", cp.Tick, err)
	}
	return b, nil
}

// SignedResult is the outcome of VerifySigned.
type SignedResult struct {
	// Key names the key that signed the checkpoints.
	Key string
	// Base is the tree the recording starts from (its size and root);
	// Entries the log entries recorded after it.
	BaseSize int64
	BaseRoot tlog.Hash
	Entries  int64
	// Checkpoints are the recording's checkpoints, all verified, in
	// order; Links the consistency proofs from earlier checkpoints, all
	// verified.
	Checkpoints []Checkpoint
	Links       []TreeLink
	// Final is true when the last checkpoint is the recording's final one.
	Final bool
}

// Last returns the last checkpoint.
func (s *SignedResult) Last() Checkpoint {
	if len(s.Checkpoints) == 0 {
		return Checkpoint{}
	}
	return s.Checkpoints[len(s.Checkpoints)-1]
}

// VerifySigned checks a recording's log against its signed checkpoints
// with the server's verifier key v, offline: it recomputes the Merkle tree
// from the tree base and every recorded entry, and requires every
// checkpoint to be signed by v, of this world, to match the tree at its
// size, and the last one to cover every recorded entry. Any entry added,
// dropped, reordered or changed after signing fails it with ErrSignature.
// It does not re-simulate: Verify checks that the state hashes follow from
// the commands.
func VerifySigned(r *Reader, v note.Verifier) (SignedResult, error) {
	var res SignedResult
	if v == nil {
		return res, errors.New("bsr: verify signed: no verifier key")
	}
	res.Key = v.Name()
	fail := func(format string, args ...any) (SignedResult, error) {
		return res, fmt.Errorf("%w: %s: "+format, append([]any{ErrSignature, r.path}, args...)...)
	}
	var base *chunkRef
	var cps []chunkRef
	for i := range r.refs {
		switch c := &r.refs[i]; c.Kind {
		case KindTree:
			if base == nil {
				base = c
			} else {
				return fail("two tree chunks (%s, %s)", base.describe(), c.describe())
			}
		case KindCheckpoint:
			cps = append(cps, *c)
		}
	}
	fi, isFork, _ := r.Fork()
	if base == nil {
		if isFork {
			return fail("not signed by %s: an unsigned fork of %s (at tick %d; 'replay fork --key' signs a fork)", v.Name(), fi.Of, fi.At)
		}
		return fail("not signed by %s: the recording is not signed (no tree chunk)", v.Name())
	}
	if base.First != r.base || base.Aux1 != r.basePos {
		return fail("tree base at tick %d position %d, recording base at tick %d position %d", base.First, base.Aux1, r.base, r.basePos)
	}
	raw, err := r.readRaw(base)
	if err != nil {
		return res, err
	}
	tb, err := decodeTreeBase(raw, base)
	if err != nil {
		return res, err
	}
	tree, err := newLogTree(tb.Size, tb.Frontier)
	if err != nil {
		return res, fmt.Errorf("%w: %s: %v", ErrCorrupt, base.describe(), err)
	}
	res.BaseSize = tb.Size
	if res.BaseRoot, err = tree.root(tb.Size); err != nil {
		return res, fmt.Errorf("%w: %s: %v", ErrCorrupt, base.describe(), err)
	}
	for _, l := range tb.Links {
		if err := tlog.CheckTree(l.Proof, tb.Size, res.BaseRoot, l.Size, l.Root); err != nil {
			return fail("consistency proof from tree size %d: %v", l.Size, err)
		}
		res.Links = append(res.Links, l)
	}
	if len(cps) == 0 {
		return fail("no checkpoint")
	}
	// Check each checkpoint when the tree reaches its size, and prune the
	// tree then: memory stays bounded by the entries between checkpoints.
	next, prev := 0, tb.Size
	var pending *Checkpoint
	loadNext := func() error {
		pending = nil
		if next == len(cps) {
			return nil
		}
		c := &cps[next]
		next++
		raw, err := r.readRaw(c)
		if err != nil {
			return err
		}
		cp, err := openCheckpoint(raw, c, v)
		if err != nil {
			return err
		}
		switch {
		case cp.World != r.h.World:
			return fmt.Errorf("%w: %s: checkpoint at tick %d is of world %d, the recording of world %d", ErrSignature, r.path, cp.Tick, cp.World, r.h.World)
		case cp.Size < prev:
			return fmt.Errorf("%w: %s: checkpoint at tick %d of tree size %d after one of %d", ErrSignature, r.path, cp.Tick, cp.Size, prev)
		}
		prev, pending = cp.Size, &cp
		return nil
	}
	check := func() error {
		for pending != nil && pending.Size == tree.n {
			root, err := tree.root(tree.n)
			if err != nil {
				return fmt.Errorf("bsr: verify signed: %w", err)
			}
			if root != pending.Root {
				return fmt.Errorf("%w: %s: checkpoint at tick %d: the recorded log's first %d entries hash to %s, signed %s (entries were added, dropped, reordered or changed)",
					ErrSignature, r.path, pending.Tick, pending.Size, root, pending.Root)
			}
			res.Checkpoints = append(res.Checkpoints, *pending)
			if err := tree.prune(); err != nil {
				return fmt.Errorf("bsr: verify signed: %w", err)
			}
			if err := loadNext(); err != nil {
				return err
			}
		}
		return nil
	}
	if err := loadNext(); err != nil {
		return res, err
	}
	if err := check(); err != nil {
		return res, err
	}
	lastPos := r.basePos
	for i := range r.cmds {
		entries, err := r.commandsChunk(&r.cmds[i])
		if err != nil {
			return res, err
		}
		for _, e := range entries {
			if err := tree.add(leafHash(e)); err != nil {
				return res, fmt.Errorf("bsr: verify signed: %w", err)
			}
			lastPos = e.Pos
			if err := check(); err != nil {
				return res, err
			}
		}
	}
	res.Entries = tree.n - tb.Size
	if pending != nil {
		return fail("checkpoint at tick %d signs %d entries, the recording holds %d (entries were dropped)", pending.Tick, pending.Size, tree.n)
	}
	if len(res.Checkpoints) == 0 {
		return fail("no checkpoint")
	}
	last := res.Last()
	res.Final = last.Final
	if last.Size != tree.n {
		return fail("%d recorded entries after the last checkpoint (tick %d) are not signed", tree.n-last.Size, last.Tick)
	}
	if last.Pos != lastPos || last.Tick != r.last {
		return fail("the last checkpoint is of tick %d position %d, the recording ends at tick %d position %d", last.Tick, last.Pos, r.last, lastPos)
	}
	return res, nil
}

// CheckSegments checks that a later segment's recording continues an
// earlier one's signed log: next carries a verified consistency proof from
// prev's last checkpoint.
func CheckSegments(prev, next SignedResult) error {
	last := prev.Last()
	for _, l := range next.Links {
		if l.Size == last.Size {
			if l.Root != last.Root {
				return fmt.Errorf("%w: the later segment's tree of size %d has root %s, the earlier segment signed %s", ErrSignature, l.Size, l.Root, last.Root)
			}
			return nil
		}
	}
	if next.BaseSize == last.Size && next.BaseRoot == last.Root {
		return nil
	}
	return fmt.Errorf("%w: the later segment proves no consistency with the earlier one's last checkpoint (tree size %d)", ErrSignature, last.Size)
}

// Checkpoints returns the recording's checkpoints in file order, decoded
// but not verified (VerifySigned verifies them); chunks that do not decode
// are skipped.
func (r *Reader) Checkpoints() []Checkpoint {
	var out []Checkpoint
	for i := range r.refs {
		c := &r.refs[i]
		if c.Kind != KindCheckpoint {
			continue
		}
		raw, err := r.readRaw(c)
		if err != nil {
			continue
		}
		if cp, err := openCheckpoint(raw, c, nil); err == nil {
			out = append(out, cp)
		}
	}
	return out
}
