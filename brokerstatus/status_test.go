package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestParseStatusGolden reads saved rabbitmqctl status outputs and compares
// what brokerstatus makes of them with testdata/NAME.golden.
func TestParseStatusGolden(t *testing.T) {
	const want512MiB = 512 << 20
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"absolute", true},
		{"relative", false},
		{"other-size", false},
		{"alarm", false},
		{"alarm-absolute", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", tc.name+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			st, err := ParseStatus(string(in))
			if err != nil {
				t.Fatal(err)
			}
			ok, why := CheckWatermark(st.Watermark, want512MiB)
			if ok != tc.ok {
				t.Errorf("ok = %v, want %v (%s)", ok, tc.ok, why)
			}
			got := fmt.Sprintf("node: %s\nversion: %s\nwatermark: %s\nabsolute: %v\nsetting: %g\ncomputed_gb: %g\nalarms: %q\nok: %v\nwhy: %s\n",
				st.Node, st.Version, st.Watermark.Line, st.Watermark.Absolute, st.Watermark.Setting, st.Watermark.ComputedGB, st.Alarms, ok, why)
			golden := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./brokerstatus -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestParseStatusNoWatermark(t *testing.T) {
	if _, err := ParseStatus("Status of node rabbit@x ...\nRabbitMQ version: 3.10.8\n"); err == nil {
		t.Fatal("want an error for output without a watermark line")
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"512MiB": 536870912, "536870912": 536870912, "512M": 536870912, "512m": 536870912, "512mib": 536870912,
		"1GB": 1e9, "1gb": 1e9, "1Gb": 1e9, "1GiB": 1 << 30, "1G": 1 << 30,
		"100kB": 100000, "100KB": 100000, "1k": 1024, "1K": 1024, "1kiB": 1024, "1KiB": 1024, "1MB": 1e6, "1": 1,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "0MiB", "0.4", "1.5GB", "1e9", "12 parsecs", "512 MiB", " 512MiB", "-5MiB", "+5", "512B", "512TB", "9999999999GiB", "99999999999999999999"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q): want an error", in)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for in, want := range map[int64]string{536870912: "512MiB", 1e9: "1GB", 1 << 30: "1GiB", 1024: "1kiB", 1500: "1500", 2000: "2kB", 3 << 20: "3MiB", 7: "7"} {
		if got := FormatSize(in); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", in, got, want)
		}
		if back, err := ParseSize(FormatSize(in)); err != nil || back != in {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", in, back, err)
		}
	}
}

func TestCheckWatermarkMessages(t *testing.T) {
	ok, why := CheckWatermark(Watermark{Absolute: false, Setting: 0.4, ComputedGB: 10.1}, 512<<20)
	if ok || !strings.Contains(why, "relative") {
		t.Errorf("relative: ok=%v why=%q", ok, why)
	}
}
