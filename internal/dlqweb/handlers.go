package dlqweb

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"eaimq/internal/dlq"
)

// The pages and the actions, each a call to the Backend.

func (s *server) groups(w http.ResponseWriter, r *http.Request) {
	o, err := s.Backend.Overview(r.Context(), r.URL.Query().Get("refresh") != "")
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	p := s.page(r, "Dead letters", o)
	p.Refresh = int(s.Refresh / time.Second)
	s.render(w, http.StatusOK, "groups.html", p)
}

func (s *server) claim(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	s.showClaim(w, r, id, "", "", http.StatusOK)
}

// showClaim renders the claim page, with an edit refused (draft and why)
// when there is one.
func (s *server) showClaim(w http.ResponseWriter, r *http.Request, id, draft, why string, status int) {
	if id == "" {
		s.fail(w, r, http.StatusBadRequest, errors.New("no claim named: /claim?id=ID"))
		return
	}
	c, found, err := s.Backend.Claim(r.Context(), id)
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	if !found {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no dead letter with id %q in claim.dead (retried, purged, or taken meanwhile; search finds it by its claimId)", id))
		return
	}
	if draft == "" {
		draft = c.Body
	}
	p := s.page(r, "Claim "+c.Key, map[string]any{"Claim": c, "Draft": draft})
	p.Error = why
	s.render(w, status, "claim.html", p)
}

// actions are what /confirm and /action know.
var actions = map[string]string{"retry": "Retry", "purge": "Purge", "restore": "Restore"}

func target(get func(string) string) (Target, error) {
	t := Target{ID: get("id"), Group: get("group")}
	if (t.ID == "") == (t.Group == "") {
		return t, errors.New("name one claim (id) or one group (group)")
	}
	return t, nil
}

func (s *server) readOnly(w http.ResponseWriter) bool {
	if s.ReadOnly {
		// Checked before anything else of an action, the CSRF token
		// included: no request reaches the backend's actions.
		http.Error(w, "dlq serve runs with -read-only: no action is possible", http.StatusForbidden)
	}
	return s.ReadOnly
}

func (s *server) confirm(w http.ResponseWriter, r *http.Request) {
	if s.readOnly(w) {
		return
	}
	q := r.URL.Query()
	verb, ok := actions[q.Get("action")]
	t, err := target(q.Get)
	if !ok {
		err = fmt.Errorf("unknown action %q: retry, purge or restore", q.Get("action"))
	} else if q.Get("action") == "restore" && t.Group != "" {
		err = errors.New("restore takes one claim (id), not a group")
	}
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	what := "claim " + t.ID
	if t.Group != "" {
		// The groups as the page showed them: no walk of its own.
		o, err := s.Backend.Overview(r.Context(), false)
		if err != nil {
			s.fail(w, r, http.StatusBadGateway, err)
			return
		}
		what = "the group (not found: it may be empty now)"
		for _, g := range o.Groups {
			if g.ID == t.Group {
				what = fmt.Sprintf("the group %q (%d dead letters when the groups were counted)", groupName(g), g.Count)
			}
		}
	}
	s.render(w, http.StatusOK, "confirm.html", s.page(r, verb+"?", map[string]any{
		"Action": q.Get("action"), "Verb": verb, "Target": t, "What": what, "Archive": !s.NoArchive,
		"Store": s.Backend.OverRows(r.Context())}))
}

func groupName(g Group) string {
	if g.Status != 0 {
		return fmt.Sprintf("%s %d", g.Reason, g.Status)
	}
	return g.Reason
}

// posted checks what every POST must carry: the CSRF token.
func (s *server) posted(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, dlq.MaxBody+64<<10)
	if err := r.ParseForm(); err != nil {
		s.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Errorf("form: %w", err))
		return false
	}
	if !equal(r.PostForm.Get("csrf"), s.csrf) {
		http.Error(w, "missing or stale form token: reload the page and try again", http.StatusForbidden)
		return false
	}
	return true
}

func (s *server) action(w http.ResponseWriter, r *http.Request) {
	if s.readOnly(w) || !s.posted(w, r) {
		return
	}
	t, err := target(r.PostForm.Get)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	var rep Report
	switch r.PostForm.Get("action") {
	case "retry":
		rep, err = s.Backend.Retry(detached(r), who(r), t)
	case "purge":
		rep, err = s.Backend.Purge(detached(r), who(r), t)
	case "restore":
		rep, err = s.Backend.Restore(detached(r), who(r), t)
	default:
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("unknown action %q: retry, purge or restore", r.PostForm.Get("action")))
		return
	}
	s.report(w, r, rep, err)
}

// detached is the context of an action: a browser that goes away (a
// closed tab, a reload) does not stop it halfway, so that what it did is
// whole and its report is in the log. Stopping dlq serve still stops it:
// Shutdown waits for it, and a process that ends returns every dead letter
// not acked to claim.dead.
func detached(r *http.Request) context.Context { return context.WithoutCancel(r.Context()) }

func (s *server) report(w http.ResponseWriter, r *http.Request, rep Report, err error) {
	p := s.page(r, "Done", rep)
	status := http.StatusOK
	if err != nil {
		// What was done before the error is in rep, and shown.
		p.Error = s.Clean(err.Error())
		fmt.Fprintf(s.Log, "dlq serve: %s\n", p.Error)
		status = http.StatusBadGateway
	}
	s.render(w, status, "report.html", p)
}

// edit is edit and retry, in two steps: "check" validates the body and
// asks for confirmation, "go" republishes it. previous, the sha256 of the
// body the form showed, travels with both, so that a dead letter that
// changed meanwhile is not replaced by an edit of what it was.
func (s *server) edit(w http.ResponseWriter, r *http.Request) {
	if s.readOnly(w) || !s.posted(w, r) {
		return
	}
	id, body, previous := r.PostForm.Get("id"), r.PostForm.Get("body"), r.PostForm.Get("previous")
	if err := s.Backend.CheckEdit(id, []byte(body)); err != nil {
		if errors.Is(err, dlq.ErrInvalid) {
			s.showClaim(w, r, id, body, s.Clean(err.Error()), http.StatusBadRequest)
		} else {
			s.fail(w, r, http.StatusBadRequest, err)
		}
		return
	}
	if r.PostForm.Get("step") != "go" {
		s.render(w, http.StatusOK, "confirm-edit.html", s.page(r, "Retry the edited claim?",
			map[string]any{"ID": id, "Body": body, "Previous": previous}))
		return
	}
	rep, err := s.Backend.EditRetry(detached(r), who(r), id, []byte(body), previous)
	if errors.Is(err, dlq.ErrInvalid) {
		s.showClaim(w, r, id, body, s.Clean(err.Error()), http.StatusBadRequest)
		return
	}
	s.report(w, r, rep, err)
}
