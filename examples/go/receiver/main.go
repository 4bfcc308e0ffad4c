// Command receiver is a callback receiver for push delivery: it checks `X-DQ-Signature` and takes each
// job once.
//
//	DQ_SECRETS=s3cr3t PORT=8080 go run ./receiver
//
// Register a topic whose callback it is:
//
//	PUT /v1/topics/orders.close {"callback": {"url": "http://127.0.0.1:8080/hook", "secret": "s3cr3t"}}
//
// Standard library only. DQ_SECRETS holds the keys it accepts, comma-separated (during a rotation, the
// new and the old one). A request is taken when its signature, computed over the raw bytes received,
// matches one of them (compared in constant time) and its timestamp is within 300 s of this machine's
// clock: then 200 with a JSON body (dq counts an empty answer, even a 204, as a failure and retries). A
// missing or bad signature is 401. Delivery is at least once: a job id seen before is answered 200 and
// not handled again (here in memory; use your database).
package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	replayWindow = 300 * time.Second
	maxBody      = 1 << 20
)

// verify reports whether header (t=<unix s>,v1=<hex>[,v1=<hex>]) signs body with one of keys.
func verify(header string, body []byte, keys [][]byte, now time.Time) bool {
	var ts []string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(part, "=")
		switch {
		case !ok:
		case k == "t":
			ts = append(ts, v)
		case k == "v1":
			sigs = append(sigs, []byte(v))
		}
	}
	if len(ts) != 1 || len(sigs) == 0 {
		return false
	}
	t, err := strconv.ParseInt(ts[0], 10, 64)
	if err != nil || t < 0 {
		return false
	}
	if d := now.Sub(time.Unix(t, 0)); d > replayWindow || d < -replayWindow {
		return false
	}
	ok := false
	for _, key := range keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(ts[0] + "."))
		mac.Write(body)
		expected := []byte(hex.EncodeToString(mac.Sum(nil)))
		for _, sig := range sigs {
			if hmac.Equal(expected, sig) { // constant time
				ok = true
			}
		}
	}
	return ok
}

// handle is where your work goes (an error has dq retry the job). This one prints the job.
func handle(job map[string]any) error {
	line, _ := json.Marshal(job)
	fmt.Println(string(line))
	return nil
}

func answer(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func main() {
	var keys [][]byte
	for _, s := range strings.Split(os.Getenv("DQ_SECRETS"), ",") {
		if s != "" {
			keys = append(keys, []byte(s))
		}
	}
	if len(keys) == 0 {
		log.Fatal("set DQ_SECRETS to the topic's secret (comma-separated during a rotation)")
	}
	host, port := os.Getenv("HOST"), os.Getenv("PORT")
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "8080"
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			answer(w, http.StatusMethodNotAllowed, map[string]string{"error": "POST only"})
			return
		}
		// The raw bytes: the signature is over them, not over parsed JSON.
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			answer(w, http.StatusRequestEntityTooLarge, map[string]string{"error": "too large"})
			return
		}
		if !verify(r.Header.Get("X-DQ-Signature"), body, keys, time.Now()) {
			answer(w, http.StatusUnauthorized, map[string]string{"error": "bad signature"})
			return
		}
		var job map[string]any
		if err := json.Unmarshal(body, &job); err != nil {
			answer(w, http.StatusBadRequest, map[string]string{"error": "not JSON"})
			return
		}
		id, _ := job["id"].(string)
		mu.Lock()
		repeat := seen[id]
		mu.Unlock()
		if !repeat {
			if err := handle(job); err != nil {
				answer(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
				return
			}
			mu.Lock()
			seen[id] = true
			mu.Unlock()
		}
		answer(w, http.StatusOK, map[string]bool{"ok": true})
	})
	server := &http.Server{Addr: host + ":" + port, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	drained := make(chan struct{})
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown) // lets the requests being answered finish
		close(drained)
	}()
	log.Printf("listening on http://%s", server.Addr)
	if err := server.ListenAndServe(); err != http.ErrServerClosed {
		log.Fatal(err)
	}
	<-drained
}
