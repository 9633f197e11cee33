package main

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Status is what brokerstatus reads out of `rabbitmqctl status`.
type Status struct {
	Node      string
	Version   string
	Watermark Watermark
	Alarms    []string
}

// Watermark is the "Memory high watermark setting:" line.
type Watermark struct {
	Line       string  // the line as printed, for messages
	Absolute   bool    // "0.5369 gb, ..." rather than "0.4 of available memory, ..."
	Setting    float64 // gb (10^9 bytes) when absolute, the fraction when relative
	ComputedGB float64
}

var (
	ansi        = regexp.MustCompile("\x1b\\[[0-9;]*m")
	reNode      = regexp.MustCompile(`(?m)^Status of node (\S+) \.\.\.`)
	reVersion   = regexp.MustCompile(`(?m)^RabbitMQ version: (\S+)`)
	reWatermark = regexp.MustCompile(`(?m)^Memory high watermark setting: (.*)$`)
	reAbsolute  = regexp.MustCompile(`^([0-9.]+) gb, computed to: ([0-9.]+) gb$`)
	reRelative  = regexp.MustCompile(`^([0-9.]+) of available memory, computed to: ([0-9.]+) gb$`)
)

// ParseStatus reads the parts of rabbitmqctl status output that matter here.
// It fails only when the watermark line is missing or unreadable, since that
// is the one thing the check cannot do without.
func ParseStatus(out string) (Status, error) {
	text := ansi.ReplaceAllString(out, "")
	var s Status
	if m := reNode.FindStringSubmatch(text); m != nil {
		s.Node = m[1]
	}
	if m := reVersion.FindStringSubmatch(text); m != nil {
		s.Version = m[1]
	}
	m := reWatermark.FindStringSubmatch(text)
	if m == nil {
		return s, fmt.Errorf("no \"Memory high watermark setting:\" line in rabbitmqctl status output")
	}
	rest := strings.TrimSpace(m[1])
	s.Watermark.Line = "Memory high watermark setting: " + rest
	if a := reAbsolute.FindStringSubmatch(rest); a != nil {
		s.Watermark.Absolute = true
		s.Watermark.Setting, _ = strconv.ParseFloat(a[1], 64)
		s.Watermark.ComputedGB, _ = strconv.ParseFloat(a[2], 64)
	} else if r := reRelative.FindStringSubmatch(rest); r != nil {
		s.Watermark.Setting, _ = strconv.ParseFloat(r[1], 64)
		s.Watermark.ComputedGB, _ = strconv.ParseFloat(r[2], 64)
	} else {
		return s, fmt.Errorf("cannot read %q", s.Watermark.Line)
	}
	s.Alarms = section(text, "Alarms")
	return s, nil
}

// section returns the non-empty lines under a status heading, "(none)" left out.
func section(text, heading string) []string {
	lines := strings.Split(text, "\n")
	var out []string
	in := false
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == heading {
			in = true
			continue
		}
		if !in {
			continue
		}
		if l == "" {
			if len(out) > 0 {
				break
			}
			continue
		}
		if l == "(none)" {
			break
		}
		if !strings.Contains(l, " ") && len(out) == 0 { // the next heading: the section was empty
			break
		}
		out = append(out, l)
	}
	return out
}

// CheckWatermark says whether the setting is the absolute size wantBytes.
// RabbitMQ prints gigabytes (10^9) to 4 decimals, so 512MiB reads 0.5369 gb;
// the comparison is to that precision.
func CheckWatermark(w Watermark, wantBytes int64) (ok bool, why string) {
	wantGB := float64(wantBytes) / 1e9
	if !w.Absolute {
		return false, fmt.Sprintf("the memory watermark is relative (%g of available memory, computed to %.4f gb), not the absolute %.4f gb wanted", w.Setting, w.ComputedGB, wantGB)
	}
	if math.Abs(w.Setting-wantGB) > 0.00005 {
		return false, fmt.Sprintf("the memory watermark is absolute %.4f gb, not the %.4f gb wanted", w.Setting, wantGB)
	}
	return true, ""
}

var reSize = regexp.MustCompile(`^([0-9]+)([A-Za-z]*)$`)

// sizeUnits maps a unit, lower-cased, to its multiplier. It is the union
// of what RabbitMQ reads for an absolute watermark: rabbitmqctl
// set_vm_memory_high_watermark absolute takes k kiB M MiB G GiB kB MB GB,
// and rabbitmq.conf (rabbit_resource_monitor_misc) the same in other
// letter cases (K, KiB, mib, Gb, ...); lower-cased, the two agree on
// every multiplier.
var sizeUnits = map[string]int64{
	"":  1,
	"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
}

// ParseSize reads an absolute watermark size as RabbitMQ does: a whole
// number of bytes, at least 1, with an optional unit (512MiB, 536870912,
// 512M, 1GB). No sign, fraction or space; a size that does not fit in 63
// bits is an error too.
func ParseSize(s string) (int64, error) {
	const forms = "want a whole number of bytes with an optional unit k, kiB, M, MiB, G, GiB (1024ⁿ), kB, MB, GB (1000ⁿ): 512MiB, 536870912, 512M, 1GB"
	m := reSize.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("bad size %q: %s", s, forms)
	}
	mult, ok := sizeUnits[strings.ToLower(m[2])]
	if !ok {
		return 0, fmt.Errorf("bad size %q: unknown unit %q; %s", s, m[2], forms)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("bad size %q: too large", s)
	}
	if n == 0 {
		return 0, fmt.Errorf("bad size %q: the watermark must be at least 1 byte", s)
	}
	return n * mult, nil
}

// FormatSize writes n in the largest unit that divides it exactly, in the
// spelling rabbitmqctl accepts (536870912 → 512MiB), for the fix command.
func FormatSize(n int64) string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"GiB", 1 << 30}, {"GB", 1e9}, {"MiB", 1 << 20}, {"MB", 1e6}, {"kiB", 1 << 10}, {"kB", 1e3}} {
		if n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}
