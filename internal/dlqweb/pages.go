package dlqweb

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// The pages of a large DLQ: a group's dead letters page by page, a search
// by id or claimId, and the health check.

// maxQuery bounds a search: an id or a claimId, not a document.
const maxQuery = 256

func pageOf(r *http.Request) int {
	n, err := strconv.Atoi(r.URL.Query().Get("page"))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

func (s *server) group(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if id == "" {
		s.fail(w, r, http.StatusBadRequest, errors.New("no group named: /group?id=ID"))
		return
	}
	l, err := s.Backend.Group(r.Context(), id, pageOf(r))
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	s.render(w, http.StatusOK, "list.html", s.page(r, "Group "+groupName(l.Group), l))
}

// archive is the purged dead letters of claim.dead.archive, a page at a
// time, each with its restore.
func (s *server) archive(w http.ResponseWriter, r *http.Request) {
	l, err := s.Backend.Archive(r.Context(), pageOf(r))
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	s.render(w, http.StatusOK, "list.html", s.page(r, "Archive", l))
}

func (s *server) search(w http.ResponseWriter, r *http.Request) {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	if q == "" {
		s.render(w, http.StatusOK, "list.html", s.page(r, "Search", nil))
		return
	}
	if len(q) > maxQuery {
		s.fail(w, r, http.StatusBadRequest, errors.New("search for a message_id, guid or claimId (or a part of one), at most 256 characters"))
		return
	}
	l, err := s.Backend.Search(r.Context(), q, pageOf(r))
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	p := s.page(r, "Search "+q, l)
	p.Query = q
	s.render(w, http.StatusOK, "list.html", p)
}

// healthz answers 200 when the broker and the store answer, else 503;
// JSON, for a monitor.
func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	h := s.Backend.Health(r.Context())
	h.Error = s.Clean(h.Error)
	h.Store = s.Clean(h.Store)
	w.Header().Set("Content-Type", "application/json")
	if !h.OK {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	json.NewEncoder(w).Encode(h)
}
