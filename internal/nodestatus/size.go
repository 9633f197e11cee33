package nodestatus

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

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
