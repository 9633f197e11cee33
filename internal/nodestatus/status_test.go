package nodestatus

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestParseStatusGolden reads real `rabbitmqctl status --formatter json`
// outputs of RabbitMQ 3.10.8 (testdata/NAME.json, captured with the setting
// NAME names: absolute 512MiB, relative 0.4, absolute 1GiB, and absolute
// 10MB, which set off the memory alarm) and compares what brokerstatus
// makes of them, its summary as text and as JSON, with testdata/NAME.golden.
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", tc.name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			st, err := ParseStatus(in)
			if err != nil {
				t.Fatal(err)
			}
			ok, why := CheckWatermark(st.Watermark, want512MiB)
			if ok != tc.ok {
				t.Errorf("ok = %v, want %v (%s)", ok, tc.ok, why)
			}
			s := newSummary("rabbit@localhost", st, want512MiB, ok, why)
			s.VHost, s.Queues = "/", []QueueSummary{}
			var b bytes.Buffer
			s.print(&b)
			js, err := json.MarshalIndent(s, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got := b.String() + string(js) + "\n"
			golden := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/nodestatus -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestWatermarkIsExact: the text status prints 0.5369 gb for 512MiB and for
// every size within 50 kB of it; the JSON's bytes tell them apart. The
// settings here are as RabbitMQ prints them, the string one as an absolute
// watermark from rabbitmq.conf with a unit might reach it (3.10 turns
// that into bytes first).
func TestWatermarkIsExact(t *testing.T) {
	for _, tc := range []struct {
		setting string
		ok      bool
	}{
		{`{"absolute":536870912}`, true},
		{`{"absolute":"512MiB"}`, true},
		{`{"absolute":"512mib"}`, true},
		{`{"absolute":536870000}`, false}, // 0.5369 gb too
		{`{"absolute":536900000}`, false}, // 0.5369 gb too
		{`{"absolute":"512MB"}`, false},
		{`{"relative":0.4}`, false},
		{`0.4`, false},
		{`{"relative":1}`, false},
	} {
		st, err := ParseStatus([]byte(`{"rabbitmq_version":"3.10.8","vm_memory_high_watermark_limit":536870912,"vm_memory_high_watermark_setting":` + tc.setting + `}`))
		if err != nil {
			t.Errorf("%s: %v", tc.setting, err)
			continue
		}
		if ok, why := CheckWatermark(st.Watermark, 512<<20); ok != tc.ok {
			t.Errorf("%s: ok = %v, want %v (%s)", tc.setting, ok, tc.ok, why)
		}
	}
	for _, bad := range []string{
		`{}`,
		`{"vm_memory_high_watermark_setting":null}`,
		`{"vm_memory_high_watermark_setting":{}}`,
		`{"vm_memory_high_watermark_setting":{"absolute":0.5}}`,
		`{"vm_memory_high_watermark_setting":{"absolute":"0.5 gb"}}`,
		`{"vm_memory_high_watermark_setting":{"relative":"x"}}`,
		`{"vm_memory_high_watermark_setting":{"absolute":1,"relative":0.4}}`,
		`{"vm_memory_high_watermark_setting":{"percent":40}}`,
		`Status of node rabbit@localhost ...`,
		``,
	} {
		if _, err := ParseStatus([]byte(bad)); err == nil {
			t.Errorf("ParseStatus(%s): want an error", bad)
		}
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
	ok, why := CheckWatermark(Watermark{Fraction: 0.4, LimitBytes: 10110600806}, 512<<20)
	if ok || !strings.Contains(why, "relative (0.4 of available memory, computed to 10110600806 bytes)") || !strings.Contains(why, "512MiB (536870912 bytes)") {
		t.Errorf("relative: ok=%v why=%q", ok, why)
	}
	ok, why = CheckWatermark(Watermark{Absolute: true, Bytes: 1 << 30, LimitBytes: 1 << 30}, 512<<20)
	if ok || !strings.Contains(why, "absolute 1GiB (1073741824 bytes)") {
		t.Errorf("1GiB: ok=%v why=%q", ok, why)
	}
}
