package claimid

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

func TestGuid(t *testing.T) {
	long := strings.Repeat("x", MaxLen)
	for _, tc := range []struct {
		name, body, guid, err string
	}{
		{"plain", `{"guid":"g1","claimId":"C-1","docs":["a.pdf"]}`, "g1", ""},
		{"docs empty is the partner's 422", `{"guid":"g2","docs":[]}`, "g2", ""},
		{"white space around", "  {\"guid\" : \"g3\"}\n", "g3", ""},
		{"escapes decoded exactly", `{"guid":"a\/b\"c\\d\u00e9"}`, `a/b"c\dé`, ""},
		{"surrogate pair", `{"guid":"p-\ud83d\ude00"}`, "p-😀", ""},
		{"raw UTF-8 kept", `{"guid":"請求-001"}`, "請求-001", ""},
		{"escaped name", `{"gu\u0069d":"esc"}`, "esc", ""},
		{"space inside", `{"guid":"a b"}`, "a b", ""},
		{"255 bytes", `{"guid":"` + long + `"}`, long, ""},
		{"nested guid ignored", `{"x":{"guid":"inner"},"guid":"outer"}`, "outer", ""},
		{"other case is another member", `{"GUID":"up","guid":"low"}`, "low", ""},
		{"invalid UTF-8 elsewhere is the partner's", "{\"guid\":\"ok\",\"note\":\"\xff\"}", "ok", ""},

		{"empty", ``, "", "empty"},
		{"blank", " \n", "", "empty"},
		{"truncated", `{"guid":`, "", "malformed JSON"},
		{"two values", `{"guid":"a"} {"guid":"b"}`, "", "more than one value"},
		{"trailing", `{"guid":"a"} x`, "", "trailing data"},
		{"array", `[1,2]`, "", "JSON is an array, not an object"},
		{"string", `"x"`, "", "JSON is a string, not an object"},
		{"null", `null`, "", "JSON is null, not an object"},
		{"bad number", `{"guid":"a","n":01}`, "", "malformed JSON"},
		{"raw control", "{\"guid\":\"a\nb\"}", "", "control character 0x0A inside a string"},
		{"bad escape", `{"guid":"a\x"}`, "", `invalid escape`},
		{"BOM", "\xef\xbb\xbf{\"guid\":\"a\"}", "", "malformed JSON"},
		{"too deep", strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), "", "nested deeper"},

		{"no guid", `{"claimId":"C-1"}`, "", `no "guid" member`},
		{"only GUID", `{"GUID":"C-1"}`, "", `no "guid" member`},
		{"empty guid", `{"guid":""}`, "", `"guid": empty`},
		{"number", `{"guid":42}`, "", `"guid": a number, not a string`},
		{"null guid", `{"guid":null}`, "", `"guid": null, not a string`},
		{"object guid", `{"guid":{"a":1}}`, "", `"guid": an object, not a string`},
		{"duplicate", `{"guid":"a","guid":"b"}`, "", `appears 2 times`},
		{"duplicate by escape", `{"guid":"a","g\u0075id":"a"}`, "", `appears 2 times`},
		{"too long", `{"guid":"` + long + `x"}`, "", "256 bytes long"},
		{"far too long", `{"guid":"` + strings.Repeat("y", 1<<20) + `"}`, "", "1048576 bytes long"},

		{"lone high surrogate", `{"guid":"sur-\ud800"}`, "", `lone surrogate \ud800`},
		{"other lone high surrogate", `{"guid":"sur-\udbff"}`, "", `lone surrogate \udbff`},
		{"lone low surrogate", `{"guid":"sur-\udc00"}`, "", `lone surrogate \udc00`},
		{"high then not low", `{"guid":"sur-\ud800\u0041"}`, "", `lone surrogate \ud800`},
		{"reversed pair", `{"guid":"sur-\ude00\ud83d"}`, "", `lone surrogate \ude00`},
		{"raw 0xff", "{\"guid\":\"bad-\xff\"}", "", "not valid UTF-8: byte 0xFF at byte 13"},
		{"raw 0xfe", "{\"guid\":\"bad-\xfe\"}", "", "not valid UTF-8: byte 0xFE"},
		{"raw encoded surrogate", "{\"guid\":\"bad-\xed\xa0\x80\"}", "", "not valid UTF-8"},
		{"overlong", "{\"guid\":\"bad-\xc0\xaf\"}", "", "not valid UTF-8"},
		{"name with a lone surrogate is not guid", `{"gu\ud800id":"x"}`, "", `no "guid" member`},

		{"newline", `{"guid":"a\nb"}`, "", "control character U+000A"},
		{"NUL", `{"guid":"a\u0000b"}`, "", "control character U+0000"},
		{"ESC", `{"guid":"a\u001bb"}`, "", "control character U+001B"},
		{"BEL", `{"guid":"a\u0007"}`, "", "control character U+0007"},
		{"DEL", `{"guid":"a\u007f"}`, "", "control character U+007F"},
		{"C1 NEL", `{"guid":"a\u0085b"}`, "", "control character U+0085"},
		{"C1 raw", "{\"guid\":\"a\xc2\x9fb\"}", "", "control character U+009F"},
		{"TAB", `{"guid":"a\tb"}`, "", "TAB at byte 1"},
		{"leading space", `{"guid":" a"}`, "", "begins with white space U+0020"},
		{"trailing space", `{"guid":"a "}`, "", "ends with white space U+0020"},
		{"trailing NBSP", `{"guid":"a\u00a0"}`, "", "ends with white space U+00A0"},
		{"leading line separator", `{"guid":"\u2028a"}`, "", "begins with white space U+2028"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			guid, err := Guid([]byte(tc.body))
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one containing %q", err, tc.err)
			case guid != tc.guid:
				t.Errorf("guid %q, want %q", guid, tc.guid)
			}
			if pg, _ := Peek([]byte(tc.body)); pg != guid {
				t.Errorf("Peek guid %q, Guid %q", pg, guid)
			}
			if err == nil {
				if err := roundTrip(guid); err != nil {
					t.Errorf("accepted guid does not survive HTTP: %v", err)
				}
			}
		})
	}
}

// The bug this package exists for: with encoding/json these pairs become
// one message_id; here each is refused, and none equals another.
func TestNoTwoClaimsOneID(t *testing.T) {
	pairs := [][2]string{
		{`{"guid":"sur-\ud800"}`, `{"guid":"sur-\udbff"}`},
		{"{\"guid\":\"bad-\xff\"}", "{\"guid\":\"bad-\xfe\"}"},
		{`{"guid":"sur-\ud800"}`, `{"guid":"sur-\ufffd"}`},
	}
	for _, p := range pairs {
		var a, b struct {
			Guid string `json:"guid"`
		}
		json.Unmarshal([]byte(p[0]), &a)
		json.Unmarshal([]byte(p[1]), &b)
		if a.Guid != b.Guid {
			t.Fatalf("encoding/json no longer merges %s and %s; the test's premise changed", p[0], p[1])
		}
		g0, err0 := Guid([]byte(p[0]))
		g1, err1 := Guid([]byte(p[1]))
		if err0 == nil && err1 == nil && g0 == g1 {
			t.Errorf("%s and %s both became %q", p[0], p[1], g0)
		}
		if err0 == nil {
			t.Errorf("%s accepted as %q", p[0], g0)
		}
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct{ s, err string }{
		{"5f0c1a2b-aaaa-bbbb-cccc-0123456789ab", ""},
		{"C-2026-0001", ""},
		{"a b", ""},
		{"請求/ü!~", ""},
		{strings.Repeat("é", MaxLen/2), ""},
		{"", "empty"},
		{strings.Repeat("é", MaxLen/2+1), "256 bytes long"},
		{"a\xffb", "not valid UTF-8: byte 0xFF at byte 1"},
		{"a\xed\xa0\x80", "not valid UTF-8"},
		{"a\rb", "U+000D"},
		{"a\x00", "U+0000"},
		{"a\x7f", "U+007F"},
		{"a\u0080", "U+0080"},
		{"a\tb", "TAB"},
		{"\ta", "TAB"},
		{" a", "begins with white space"},
		{"a\u3000", "ends with white space U+3000"},
	} {
		err := Check(tc.s)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("Check(%q): unexpected %v", tc.s, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Check(%q) = %v, want one containing %q", tc.s, err, tc.err)
		}
		if err == nil {
			if err := roundTrip(tc.s); err != nil {
				t.Errorf("Check(%q) passed, but HTTP: %v", tc.s, err)
			}
		}
	}
}

func TestHeaderValue(t *testing.T) {
	for _, tc := range []struct{ s, err string }{
		{"application/json", ""},
		{"application/json; charset=utf-8", ""},
		{"a\tb", ""}, // RFC 9110 allows TAB inside
		{"", ""},
		{"text/plain; name=請求", ""},
		{"application/json\r\nX-Evil: 1", "U+000D"},
		{"a\nb", "U+000A"},
		{"a\x00", "U+0000"},
		{"a\u0085", "U+0085"},
		{"a\xff", "not valid UTF-8"},
		{" application/json", "begins with SP or TAB"},
		{"application/json\t", "ends with SP or TAB"},
	} {
		err := HeaderValue(tc.s)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("HeaderValue(%q): unexpected %v", tc.s, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("HeaderValue(%q) = %v, want one containing %q", tc.s, err, tc.err)
		}
		if err == nil {
			if err := roundTrip(tc.s); err != nil {
				t.Errorf("HeaderValue(%q) passed, but HTTP: %v", tc.s, err)
			}
		}
	}
}

func TestPeek(t *testing.T) {
	huge := []byte(`{"claimId":"C-big","pad":"` + strings.Repeat("x", 16<<20) + `","guid":"big"}`)
	for _, tc := range []struct {
		name, body, guid, claimID string
	}{
		{"both", `{"guid":"g","claimId":"C-1"}`, "g", "C-1"},
		{"not JSON", "hello", "", ""},
		{"truncated", `{"guid":"g","claimId":"C-1"`, "", ""},
		{"bad guid, good claimId", `{"guid":"sur-\ud800","claimId":"C-2"}`, "", "C-2"},
		{"claimId not a string", `{"guid":"g","claimId":7}`, "g", ""},
		{"claimId twice", `{"guid":"g","claimId":"a","claimId":"b"}`, "g", ""},
		{"claimId with a newline", `{"guid":"g","claimId":"a\nb"}`, "g", ""},
		{"other case", `{"GUID":"g","ClaimId":"c"}`, "", ""},
		{"16 MiB", string(huge), "big", "C-big"},
		{"16 MiB of nothing", string(bytes.Repeat([]byte{0}, 16<<20)), "", ""},
		{"16 MiB of brackets", strings.Repeat("[", 16<<20), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, c := Peek([]byte(tc.body))
			if g != tc.guid || c != tc.claimID {
				t.Errorf("Peek = %q, %q; want %q, %q", g, c, tc.guid, tc.claimID)
			}
		})
	}
}

// roundTrip sends s as the Idempotency-Key header through a real HTTP
// client and server and says whether the same bytes arrived.
func roundTrip(s string) error {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Idempotency-Key")
	}))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodPost, srv.URL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", s)
	resp, err := srv.Client().Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if got != s {
		return &mismatch{s, got}
	}
	return wireTrip(s)
}

type mismatch struct{ sent, got string }

func (m *mismatch) Error() string { return "sent " + quote(m.sent) + ", received " + quote(m.got) }

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// wireTrip writes s in a request header with net/http and parses it back,
// without a network: cheap enough for the fuzzer.
func wireTrip(s string) error {
	req, err := http.NewRequest(http.MethodPost, "http://partner/v1/claims", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", s)
	var buf bytes.Buffer
	if err := req.Write(&buf); err != nil {
		return err
	}
	back, err := http.ReadRequest(bufio.NewReader(&buf))
	if err != nil {
		return err
	}
	if vs := back.Header.Values("Idempotency-Key"); len(vs) != 1 || vs[0] != s {
		return &mismatch{s, strings.Join(vs, "|")}
	}
	return nil
}

// units is an independent, obviously faithful reading of a JSON string's
// raw content: every escape gives its UTF-16 code unit, every raw UTF-8
// character its code units, and every byte that is not UTF-8 a marker of
// its own (-1 - byte). Two raw contents mean the same text exactly when
// their units are equal; escapes that spell the same characters in
// different ways ("\u0041" and "A") rightly compare equal.
func units(raw []byte) []int {
	var u []int
	for i := 0; i < len(raw); {
		if raw[i] == '\\' && i+1 < len(raw) {
			if raw[i+1] == 'u' && i+6 <= len(raw) {
				r, _ := hex4(raw, i+2)
				u = append(u, int(r))
				i += 6
				continue
			}
			u = append(u, int(map[byte]rune{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}[raw[i+1]]))
			i += 2
			continue
		}
		r, n := utf8.DecodeRune(raw[i:])
		if r == utf8.RuneError && n == 1 {
			u = append(u, -1-int(raw[i]))
		} else {
			for _, c := range utf16.Encode([]rune{r}) {
				u = append(u, int(c))
			}
		}
		i += n
	}
	return u
}

func toInts(u []uint16) []int {
	out := make([]int, len(u))
	for i, c := range u {
		out[i] = int(c)
	}
	return out
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzGuid holds Guid to its promises on arbitrary bodies a and b, each
// also wrapped as the raw content of a "guid" string:
//
//   - an accepted guid passes Check and HeaderValue, survives net/http as
//     a header value byte for byte, and is what Peek returns;
//   - Guid accepts nothing encoding/json calls malformed, and an accepted
//     guid is what encoding/json reads for that member;
//   - an accepted guid is exactly the text its raw JSON content spells
//     (units), so two accepted guids are equal only when their raw
//     contents spell the same text: nothing is normalised into a collision;
//   - whatever Check accepts survives net/http.
//
// Run it with
//
//	go test -run '^$' -fuzz '^FuzzGuid$' -fuzztime 20s ./internal/claimid
func FuzzGuid(f *testing.F) {
	seeds := []string{
		`{"guid":"sur-\ud800"}`, `{"guid":"sur-\udbff"}`, `{"guid":"sur-\udc00"}`,
		"{\"guid\":\"bad-\xff\"}", "{\"guid\":\"bad-\xfe\"}", `{"guid":"sur-\ufffd"}`,
		`{"guid":"p-\ud83d\ude00"}`, `{"guid":"a\nb"}`, `{"guid":"a\u0000"}`, `{"guid":"a\u001b"}`,
		`{"guid":"a\u0007"}`, `{"guid":"a\tb"}`, `{"guid":" a"}`, `{"guid":"a\u0085"}`,
		`{"guid":"a","guid":"b"}`, `{"GUID":"a"}`, `{"gu\u0069d":"x"}`, `{"guid":"請求"}`,
		`{"guid":"5f0c-aa","claimId":"C-1","docs":["r.pdf"]}`, `[{"guid":"a"}]`, ``, `{"guid":`,
	}
	raws := []string{`sur-\ud800`, `sur-\udbff`, "bad-\xff", "bad-\xfe", `A`, `\u0041`, `\u00e9`, "\xc3\xa9", `a\/b`, `a/b`}
	for i, s := range seeds {
		f.Add([]byte(s), []byte(raws[i%len(raws)]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		wrap := func(raw []byte) []byte {
			return append(append([]byte(`{"guid":"`), raw...), `"}`...)
		}
		type got struct {
			guid string
			raw  []byte
			ok   bool
		}
		check := func(body []byte) got {
			g, err := Guid(body)
			pg, _ := Peek(body)
			if pg != g {
				t.Fatalf("Peek %q, Guid %q (%v) for %q", pg, g, err, body)
			}
			if err != nil {
				return got{}
			}
			if err := Check(g); err != nil {
				t.Fatalf("accepted %q fails Check: %v", g, err)
			}
			if err := HeaderValue(g); err != nil {
				t.Fatalf("accepted %q fails HeaderValue: %v", g, err)
			}
			if err := wireTrip(g); err != nil {
				t.Fatalf("accepted %q: %v", g, err)
			}
			var v map[string]any
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatalf("accepted %q from a body encoding/json refuses: %v", g, err)
			}
			if v["guid"] != g {
				t.Fatalf("accepted %q, encoding/json reads %q", g, v["guid"])
			}
			// The guid is exactly the text its raw JSON spells: no byte
			// replaced, no escape merged. Together with equal units for
			// equal text, this is injectivity on a single input.
			d, _ := scan(body)
			if want := utf16.Encode([]rune(g)); !equalInts(units(d.guid.raw), toInts(want)) {
				t.Fatalf("raw %q spells %v, guid %q is %v", d.guid.raw, units(d.guid.raw), g, want)
			}
			return got{g, d.guid.raw, true}
		}
		for _, pair := range [][2][]byte{{a, b}, {wrap(a), wrap(b)}} {
			x, y := check(pair[0]), check(pair[1])
			if x.ok && y.ok && x.guid == y.guid && !equalInts(units(x.raw), units(y.raw)) {
				t.Fatalf("raw guids %q and %q both became %q", x.raw, y.raw, x.guid)
			}
		}
		if !json.Valid(a) {
			if _, err := Guid(a); err == nil {
				t.Fatalf("accepted a body encoding/json calls invalid: %q", a)
			}
		}
		if Check(string(a)) == nil {
			if err := wireTrip(string(a)); err != nil {
				t.Fatalf("Check passed %q: %v", a, err)
			}
		}
	})
}
