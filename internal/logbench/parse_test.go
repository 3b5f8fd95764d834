package logbench

import (
	"slices"
	"testing"
)

func TestParseInts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		err  string
	}{
		{"100,4096", []int{100, 4096}, ""},
		{" 5 ,, 7,", []int{5, 7}, ""},
		{"", nil, "empty list"},
		{" , ", nil, "empty list"},
		{"10,0", nil, `"0" is not a positive integer`},
		{"10,-3", nil, `"-3" is not a positive integer`},
		{"1e3", nil, `"1e3" is not a positive integer`},
	} {
		got, err := ParseInts(tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%q: %v, want error %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v %v, want %v", tc.in, got, err, tc.want)
		}
	}
}
