package main

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		body, guid, err string
	}{
		{`{"guid":"g1","claimId":"C-1","docs":["a.pdf"]}`, "g1", ""},
		{`{"guid":"g2","docs":[]}`, "g2", ""}, // the partner's 422 to give, not ours
		{"  {\"guid\":\"g3\"}\n", "g3", ""},
		{``, "", "empty"},
		{`{"guid":`, "", "malformed JSON"},
		{`{"guid":"a"} {"guid":"b"}`, "", "more than one value"},
		{`[1,2]`, "", "an array, not an object"},
		{`"x"`, "", "a string, not an object"},
		{`null`, "", "null, not an object"},
		{`{"claimId":"C-1"}`, "", `no "guid"`},
		{`{"guid":""}`, "", `"guid" is empty`},
		{`{"guid":42}`, "", `"guid" is a number`},
		{`{"guid":null}`, "", `"guid" is null`},
		{`{"guid":"` + strings.Repeat("x", 256) + `"}`, "", "255"},
	} {
		guid, err := validate([]byte(tc.body))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: unexpected error %v", tc.body, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one containing %q", tc.body, err, tc.err)
		case guid != tc.guid:
			t.Errorf("%q: guid %q, want %q", tc.body, guid, tc.guid)
		}
	}
}

func TestReadClaimDirectory(t *testing.T) {
	scratch := make([]byte, 16)
	if c := readClaim(t.TempDir(), nil, 100, &scratch); c.err == nil || !strings.Contains(c.err.Error(), "directory") {
		t.Errorf("a directory: err %v", c.err)
	}
}

func TestReadFileLimitsAndGrows(t *testing.T) {
	dir := t.TempDir()
	body := strings.Repeat("y", 100)
	p := dir + "/c.json"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	scratch := make([]byte, 7) // smaller than the file: must grow
	got, err := readFile(p, 1000, &scratch)
	if err != nil || string(got) != body {
		t.Fatalf("readFile: %q %v", got, err)
	}
	got, err = readFile(p, 51, &scratch)
	if err != nil || len(got) != 51 {
		t.Fatalf("limit 51: read %d, %v", len(got), err)
	}
	if _, err := readFile(dir+"/missing", 10, &scratch); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
}
