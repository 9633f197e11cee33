package main

import (
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
	if c := readClaim(t.TempDir(), nil, 100); c.err == nil || !strings.Contains(c.err.Error(), "directory") {
		t.Errorf("a directory: err %v", c.err)
	}
}
