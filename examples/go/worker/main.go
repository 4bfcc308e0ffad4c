// Command worker is a pull worker: it reserves jobs of TOPIC... (highest priority first), handles them,
// and acks or nacks them.
//
//	DQ_URL=http://127.0.0.1:6789 DQ_TOKEN=... go run ./worker orders.close orders.remind
//
// Standard library only. It reserves up to DQ_COUNT jobs (10) with a long poll of DQ_WAIT_MS (20000),
// handles them one by one, acks the ones that succeeded in one request (ack many) and nacks each one that
// failed with its error (dq retries it after its backoff, or moves it to the dead list after its last
// attempt). While a job runs, a heartbeat touches every job of the batch still held before half of its
// reservation has passed, so a long job is not handed to another worker (this uses the `deadline` dq
// sends, on Redis's clock: keep this machine's clock in sync). SIGINT or SIGTERM: it stops reserving,
// finishes the batch it holds (the long poll in flight ends within DQ_WAIT_MS) and exits 0; a second
// signal exits at once, and what it held comes back after its TTR.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var (
	dqURL   = strings.TrimRight(envOr("DQ_URL", "http://127.0.0.1:6789"), "/")
	dqToken = os.Getenv("DQ_TOKEN")
	count   = envInt("DQ_COUNT", 10)
	waitMs  = envInt("DQ_WAIT_MS", 20000)
	// The long poll's own timeout is set per request; this one bounds the other calls.
	client = &http.Client{}
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return n
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

func statusOf(err error) int {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr.Status
	}
	return 0
}

// api makes one call to dq-server within timeout and decodes its JSON answer into out (when not nil).
func api(method, path string, body, out any, timeout time.Duration) error {
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
	c := *client
	c.Timeout = timeout
	resp, err := c.Do(req)
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

// Job is a reserved job.
type Job struct {
	ID       string          `json:"id"`
	Topic    string          `json:"topic"`
	Body     json.RawMessage `json:"body"`
	Attempt  int             `json:"attempt"`
	Receipt  string          `json:"receipt"`
	Deadline int64           `json:"deadline"` // Unix ms, Redis's clock
}

func jobPath(job *Job, verb string) string {
	return "/v1/jobs/" + url.PathEscape(job.ID) + "/" + verb
}

// handle is where your work goes; an error fails the job. This one prints the job; a body with
// "sleep_ms" takes that long, and a body with "fail" fails with that message.
func handle(job *Job) error {
	var body struct {
		SleepMs int64 `json:"sleep_ms"`
		Fail    any   `json:"fail"`
	}
	_ = json.Unmarshal(job.Body, &body) // a body that is not such an object is just printed
	time.Sleep(time.Duration(body.SleepMs) * time.Millisecond)
	if body.Fail != nil && body.Fail != false && body.Fail != "" {
		return fmt.Errorf("%v", body.Fail)
	}
	line, _ := json.Marshal(map[string]any{"id": job.ID, "topic": job.Topic, "attempt": job.Attempt, "body": job.Body})
	fmt.Println(string(line))
	return nil
}

// held is the jobs this worker holds, each with when to touch it next; the heartbeat touches them.
type held struct {
	mu   sync.Mutex
	jobs map[string]*heldJob
}

type heldJob struct {
	job     *Job
	touchAt time.Time
}

func touchAt(deadlineMs int64) time.Time {
	left := time.Until(time.UnixMilli(deadlineMs))
	if left < 0 {
		left = 0
	}
	return time.Now().Add(left / 2)
}

func (h *held) add(job *Job) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.jobs[job.ID] = &heldJob{job: job, touchAt: touchAt(job.Deadline)}
}

func (h *held) drop(job *Job) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.jobs, job.ID)
}

func (h *held) heartbeat() {
	for range time.Tick(200 * time.Millisecond) {
		h.mu.Lock()
		var due []*Job
		for _, e := range h.jobs {
			if time.Now().After(e.touchAt) {
				due = append(due, e.job)
			}
		}
		h.mu.Unlock()
		for _, job := range due {
			var answer struct {
				Deadline int64 `json:"deadline"`
			}
			err := api("POST", jobPath(job, "touch"), map[string]string{"receipt": job.Receipt}, &answer, 10*time.Second)
			if err != nil {
				log.Printf("touch %s: %v", job.ID, err)
				if s := statusOf(err); s == 404 || s == 409 {
					h.drop(job) // finished, or no longer ours: nothing to extend
				}
				continue // otherwise tried again on the next beat
			}
			h.mu.Lock()
			if e, ok := h.jobs[job.ID]; ok {
				e.touchAt = touchAt(answer.Deadline)
			}
			h.mu.Unlock()
		}
	}
}

// ackMany acks jobs in one request, sending again the entries whose outcome dq could not give.
func ackMany(jobs []*Job) {
	for attempt := 1; attempt <= 3 && len(jobs) > 0; attempt++ {
		acks := make([]map[string]string, len(jobs))
		for i, j := range jobs {
			acks[i] = map[string]string{"id": j.ID, "receipt": j.Receipt}
		}
		var answer struct {
			Results []struct {
				Error *APIError `json:"error"`
			} `json:"results"`
		}
		if err := api("POST", "/v1/jobs/ack", map[string]any{"acks": acks}, &answer, 10*time.Second); err != nil {
			log.Printf("ack many (%d jobs), try %d: %v", len(jobs), attempt, err)
			if s := statusOf(err); s != 0 && s != 503 {
				return
			}
			time.Sleep(time.Duration(200<<attempt) * time.Millisecond)
			continue
		}
		var again []*Job
		for i, r := range answer.Results {
			switch {
			case r.Error == nil:
			case r.Error.Code == "unavailable":
				again = append(again, jobs[i])
			default: // stale_receipt: the reservation ended and the job is someone else's now
				log.Printf("ack %s: %s: %s", jobs[i].ID, r.Error.Code, r.Error.Message)
			}
		}
		jobs = again
		if len(jobs) > 0 {
			time.Sleep(time.Duration(200<<attempt) * time.Millisecond)
		}
	}
	if len(jobs) > 0 {
		log.Printf("gave up acking %d jobs: they come back after their TTR", len(jobs))
	}
}

// nack fails job: dq retries it after its backoff, or moves it to the dead list after its last attempt.
func nack(job *Job, reason string) {
	if len(reason) > 4000 {
		reason = reason[:4000]
	}
	body := map[string]string{"receipt": job.Receipt, "error": reason}
	if err := api("POST", jobPath(job, "nack"), body, nil, 10*time.Second); err != nil {
		log.Printf("nack %s: %v (it comes back after its TTR)", job.ID, err)
	}
}

func main() {
	topics := os.Args[1:]
	if len(topics) == 0 {
		fmt.Fprintln(os.Stderr, "usage: worker TOPIC [TOPIC...]")
		os.Exit(2)
	}
	var stopping atomic.Bool
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for sig := range signals {
			if stopping.Swap(true) {
				os.Exit(128 + int(sig.(syscall.Signal)))
			}
			log.Printf("%v: finishing the jobs held, then stopping", sig)
		}
	}()
	h := &held{jobs: map[string]*heldJob{}}
	go h.heartbeat()
	pause := 500 * time.Millisecond
	for !stopping.Load() {
		var answer struct {
			Jobs []*Job `json:"jobs"`
		}
		req := map[string]any{"topics": topics, "count": count, "timeout_ms": waitMs}
		if err := api("POST", "/v1/reserve", req, &answer, time.Duration(waitMs)*time.Millisecond+10*time.Second); err != nil {
			if s := statusOf(err); s == 400 || s == 401 || s == 403 {
				log.Fatalf("reserve: %v", err) // a mistake to fix, not to retry
			}
			log.Printf("reserve: %v; again in %v", err, pause)
			time.Sleep(pause)
			if pause *= 2; pause > 10*time.Second {
				pause = 10 * time.Second
			}
			continue
		}
		pause = 500 * time.Millisecond
		for _, job := range answer.Jobs {
			h.add(job)
		}
		var succeeded []*Job
		for _, job := range answer.Jobs {
			if err := handle(job); err != nil {
				h.drop(job)
				nack(job, err.Error())
				continue
			}
			succeeded = append(succeeded, job)
		}
		for _, job := range succeeded {
			h.drop(job)
		}
		ackMany(succeeded)
	}
	log.Print("stopped")
}
