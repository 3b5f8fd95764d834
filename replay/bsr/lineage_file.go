package bsr

import "github.com/anoptic/broadside/lineage"

// LineageOf indexes the lineage recorded in the recording at path
// (Reader.Lineage), closing the file after.
func LineageOf(path string) (*lineage.Index, error) {
	r, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Lineage()
}
