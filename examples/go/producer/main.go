// Command producer pushes COUNT jobs to TOPIC, each due DELAY_MS from now, and prints each job's id on
// its own line.
//
//	DQ_URL=http://127.0.0.1:6789 DQ_TOKEN=... go run ./producer orders.close 10 30000
//
// Standard library only. Each job gets an id made here, so a push whose answer was lost (a timeout, a
// dropped connection, a 503) can be sent again safely: dq never stores the same id twice, and a 409
// `conflict` on such a retry means the first try was stored.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

var (
	dqURL   = strings.TrimRight(envOr("DQ_URL", "http://127.0.0.1:6789"), "/")
	dqToken = os.Getenv("DQ_TOKEN")
	client  = &http.Client{Timeout: 10 * time.Second}
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// APIError is an error answer of dq: Status is the HTTP status, Code dq's error code.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Code, e.Message) }

// api makes one call to dq-server and decodes its JSON answer into out (when out is not nil).
func api(method, path string, body, out any) error {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, dqURL+path, reader)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json") // dq refuses a body declared otherwise
	}
	if dqToken != "" {
		req.Header.Set("Authorization", "Bearer "+dqToken)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error APIError `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
			e.Error = APIError{Code: "http_error", Message: resp.Status}
		}
		e.Error.Status = resp.StatusCode
		return &e.Error
	}
	if out != nil && len(bytes.TrimSpace(data)) > 0 {
		return json.Unmarshal(data, out)
	}
	return nil
}

// Job is what a push sends.
type Job struct {
	ID      string `json:"id"`
	Topic   string `json:"topic"`
	Body    any    `json:"body"`
	DelayMs int64  `json:"delay_ms"`
}

// push pushes job, retrying what may not have been stored with the same id.
func push(job Job) error {
	const tries = 5
	for attempt := 1; ; attempt++ {
		err := api("POST", "/v1/jobs", job, nil)
		if err == nil {
			return nil
		}
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			if apiErr.Code == "conflict" && attempt > 1 {
				return nil // stored by an earlier try whose answer was lost
			}
			if apiErr.Status != http.StatusServiceUnavailable || attempt == tries {
				return err
			}
		} else if attempt == tries {
			return err // a network error or a timeout: the push may or may not have been stored
		}
		time.Sleep(time.Duration(200<<attempt) * time.Millisecond)
	}
}

func newID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func main() {
	args := os.Args[1:]
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "usage: producer TOPIC [COUNT] [DELAY_MS]")
		os.Exit(2)
	}
	count, delayMs := 1, int64(0)
	if len(args) > 1 {
		count, _ = strconv.Atoi(args[1])
	}
	if len(args) > 2 {
		delayMs, _ = strconv.ParseInt(args[2], 10, 64)
	}
	for n := 0; n < count; n++ {
		job := Job{ID: newID(), Topic: args[0], Body: map[string]int{"n": n}, DelayMs: delayMs}
		if err := push(job); err != nil {
			fmt.Fprintln(os.Stderr, "push:", err)
			os.Exit(1)
		}
		fmt.Println(job.ID)
	}
}
