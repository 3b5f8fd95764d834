package broadside

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteText writes s for people ('replay seek'): a table of the sectors,
// then the listed ships.
func (s StateSummary) WriteText(w io.Writer) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "sector\tships\tsunk\tballs\tstate hash (matches the recording)")
	for _, sec := range s.Sectors {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\n", sec.Sector, sec.Ships, sec.Sunk, sec.Balls, sec.Hash)
	}
	fmt.Fprintf(tw, "all\t%d\t%d\t%d\t\n", s.Ships, s.Sunk, s.Balls)
	tw.Flush()
	if len(s.Listed) > 0 {
		fmt.Fprintln(w, "most damaged ships:")
		tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "  player\tsector\tx m\ty m\theading\tspeed m/s\thull\tthrottle\trudder")
		for _, v := range s.Listed {
			hull := fmt.Sprint(v.Hull)
			if v.Sunk {
				hull = "sunk"
			}
			fmt.Fprintf(tw, "  %d\t%d\t%.0f\t%.0f\t%.0f°\t%.1f\t%s\t%d%%\t%d%%\n", v.Player, v.Sector, v.X, v.Y, v.Heading, v.Speed, hull, v.Throttle, v.Rudder)
		}
		tw.Flush()
	}
}
