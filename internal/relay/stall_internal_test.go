package relay

import (
	"net"
	"testing"
)

// TestNextFirst: after a stall the list is dialled from the address after
// the node given up on, which goes last.
func TestNextFirst(t *testing.T) {
	const a, b, c = "amqp://u:p@10.0.0.1:5672/v", "amqp://u:p@10.0.0.2/v", "amqps://u:p@10.0.0.3/v"
	list := a + "," + b + "," + c
	tcp := func(s string) net.Addr { addr, _ := net.ResolveTCPAddr("tcp", s); return addr }
	for _, tc := range []struct {
		name, raw string
		remote    net.Addr
		want      string
	}{
		{"on the first", list, tcp("10.0.0.1:5672"), b + "," + c + "," + a},
		{"on the second (port 5672 by default)", list, tcp("10.0.0.2:5672"), c + "," + a + "," + b},
		{"on the last (amqps: 5671)", list, tcp("10.0.0.3:5671"), list},
		{"no match: rotated by one", list, tcp("10.9.9.9:5672"), b + "," + c + "," + a},
		{"another port: no match", list, tcp("10.0.0.2:5673"), b + "," + c + "," + a},
		{"one address", a, tcp("10.0.0.1:5672"), a},
		{"no remote", list, nil, b + "," + c + "," + a},
	} {
		if got := nextFirst(tc.raw, tc.remote); got != tc.want {
			t.Errorf("%s: nextFirst = %q, want %q", tc.name, got, tc.want)
		}
	}
}
