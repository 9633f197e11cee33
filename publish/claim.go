package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
)

// claim is one file to publish: its bytes, unchanged, and the guid that
// becomes the message_id.
type claim struct {
	name string // file name as given ("-" for stdin)
	body []byte
	guid string
	err  error // why it cannot be published; nil when valid
}

// readClaim reads and validates one claim. It reads at most maxBytes+1 bytes
// so that a huge file is refused without being held in memory.
func readClaim(name string, stdin io.Reader, maxBytes int64) claim {
	c := claim{name: name}
	var r io.Reader
	if name == "-" {
		r = stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			c.err = openError(err)
			return c
		}
		defer f.Close()
		r = f
	}
	body, err := io.ReadAll(io.LimitReader(r, maxBytes+1))
	if errors.Is(err, syscall.EISDIR) {
		c.err = errors.New("is a directory")
		return c
	}
	if err != nil {
		c.err = fmt.Errorf("read: %w", err)
		return c
	}
	if int64(len(body)) > maxBytes {
		c.err = fmt.Errorf("larger than the %d-byte limit (-max-bytes)", maxBytes)
		return c
	}
	c.body = body
	c.guid, c.err = validate(body)
	return c
}

func openError(err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return errors.New("no such file")
	case errors.Is(err, os.ErrPermission):
		return errors.New("permission denied")
	}
	return err
}

// validate checks that body is a JSON object with a non-empty string guid,
// and returns the guid. Only what the relay itself needs is checked: the
// partner judges the rest (an empty docs list is its 422 to give).
func validate(body []byte) (string, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return "", errors.New("empty file, not a claim JSON object")
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("malformed JSON: %w", err)
	}
	if dec.More() {
		return "", errors.New("malformed JSON: more than one value in the file")
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", errors.New("malformed JSON: trailing data after the object")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return "", fmt.Errorf("JSON is %s, not an object", kind(v))
	}
	g, present := obj["guid"]
	if !present {
		return "", errors.New(`no "guid" field (it becomes the message_id)`)
	}
	s, ok := g.(string)
	if !ok {
		return "", fmt.Errorf(`"guid" is %s, not a string`, kind(g))
	}
	if s == "" {
		return "", errors.New(`"guid" is empty`)
	}
	if len(s) > 255 {
		return "", errors.New(`"guid" is longer than 255 bytes, the AMQP limit for message_id`)
	}
	return s, nil
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// readClaims reads and validates files with a few goroutines: a batch of
// many small files is bound by open/read/close syscalls, which overlap well.
func readClaims(files []string, stdin io.Reader, maxBytes int64) []claim {
	claims := make([]claim, len(files))
	workers := min(8, len(files))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				claims[i] = readClaim(files[i], stdin, maxBytes)
			}
		}()
	}
	for i := range files {
		next <- i
	}
	close(next)
	wg.Wait()
	return claims
}
