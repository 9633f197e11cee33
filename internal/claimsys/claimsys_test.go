package claimsys

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestFixtureRules(t *testing.T) {
	srv := httptest.NewServer(New())
	defer srv.Close()
	post := func(body, key string) int {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/claims", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		body string
		want int
	}{
		{`{"guid":"a","claimId":"C-1","docs":["r.pdf"]}`, 201},
		{`{"guid":"b","claimId":"C-2","docs":[]}`, 422},
		{`{"guid":"c","claimId":"C-3"}`, 422},
		{`{"guid":"d","claimId":"BUSY-1","docs":["r.pdf"]}`, 503},
		{`not json`, 400},
	} {
		if got := post(tc.body, ""); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.body, got, tc.want)
		}
	}
	post(`{"guid":"a","claimId":"C-1","docs":["r.pdf"]}`, "a")
	post(`{"guid":"a","claimId":"C-1","docs":["r.pdf"]}`, "a")
	resp, err := http.Get(srv.URL + "/_stats")
	if err != nil {
		t.Fatal(err)
	}
	var st Stats
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if st.ByGuid["a"] != 3 || st.ByGuid["d"] != 1 || st.Total != 7 || st.Absorbable != 1 || st.ByStatus["201"] != 3 {
		t.Errorf("stats: %+v", st)
	}
}
