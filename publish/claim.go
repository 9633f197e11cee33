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

// readClaim reads and validates one claim. It reads at most maxBytes+1
// bytes so that a huge file is refused without being held in memory.
func readClaim(name string, stdin io.Reader, maxBytes int64, scratch *[]byte) claim {
	c := claim{name: name}
	var body []byte
	var err error
	if name == "-" {
		body, err = io.ReadAll(io.LimitReader(stdin, maxBytes+1))
	} else {
		body, err = readFile(name, maxBytes+1, scratch)
	}
	switch {
	case errors.Is(err, syscall.EISDIR):
		c.err = errors.New("is a directory")
		return c
	case err != nil:
		c.err = openError(err)
		return c
	case int64(len(body)) > maxBytes:
		c.err = fmt.Errorf("larger than the %d-byte limit (-max-bytes)", maxBytes)
		return c
	}
	c.body = body
	c.guid, c.err = validate(body)
	return c
}

// readFile reads at most limit bytes of name with bare syscalls (open,
// read, close): for a batch of thousands of small claim files, os.File's
// bookkeeping costs more than the reads, and the batch is validated before
// anything is published, so this time is pure latency. scratch is the
// caller's reusable buffer; the result is a copy of exactly what was read.
func readFile(name string, limit int64, scratch *[]byte) ([]byte, error) {
	fd, err := syscall.Open(name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	for err == syscall.EINTR {
		fd, err = syscall.Open(name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer syscall.Close(fd)
	buf := *scratch
	n := 0
	for int64(n) < limit {
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
			*scratch = buf
		}
		want := min(len(buf), int(min(limit, int64(len(buf)))))
		m, err := syscall.Read(fd, buf[n:want])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: name, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	return append([]byte(nil), buf[:n]...), nil
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
			scratch := make([]byte, 64<<10)
			for i := range next {
				claims[i] = readClaim(files[i], stdin, maxBytes, &scratch)
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
