package main

// The web playground (clients/gateway/playground, embedded in the binary): a chat in a steady
// session over /v1/chat/completions, with fork and delete, showing the state bytes and per-token
// latency. Served at / and its few files by name; every other path goes on to the API.

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed playground
var playgroundFiles embed.FS

func withPlayground(next http.Handler) http.Handler {
	files, err := fs.Sub(playgroundFiles, "playground")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	server := http.FileServer(http.FS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/")
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			if _, err := fs.Stat(files, name); name == "" || (err == nil && !strings.Contains(name, "/")) {
				w.Header().Set("Cache-Control", "no-cache")
				server.ServeHTTP(w, r)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
