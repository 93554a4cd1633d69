package main

// Steady's speculative-decoding extension on the OpenAI endpoints (docs/api.md, docs/speculative.md):
// the body's "speculation": {"mode": "off" | "ngram" | "draft", "draft_tokens": K} becomes
// GenerateRequest.speculation (steady-server checks the values: a mode it does not serve, K outside
// [1, 32]); the answer's usage reports the drafted and accepted tokens. Speculation changes the
// speed only: the tokens are those plain decoding gives.

import (
	"bytes"
	"encoding/json"
	"net/http"

	steadyv1 "steady/v1"
)

type speculationField struct {
	Mode        string `json:"mode"`         // empty: the server's --speculative
	DraftTokens int32  `json:"draft_tokens"` // 0: the server's --draft-tokens
}

// setSpeculation reads the speculation extension into g; on a refusal it has written the error and
// returns false. Absent or null: the server's default.
func setSpeculation(w http.ResponseWriter, raw json.RawMessage, g *steadyv1.GenerateRequest) bool {
	if len(raw) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return true
	}
	var s speculationField
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(&s); err != nil {
		invalid(w, "speculation", `speculation: `+err.Error()+` (expected {"mode": "off"|"ngram"|"draft", "draft_tokens": K})`)
		return false
	}
	g.Speculation = &steadyv1.Speculation{Mode: s.Mode, DraftTokens: s.DraftTokens}
	return true
}

// addSpeculationUsage adds what speculation did to an OpenAI usage object, when it drafted anything:
// Steady's "speculation": {"drafted_tokens", "accepted_tokens"}, and OpenAI's predicted-outputs
// counts in completion_tokens_details (accepted_prediction_tokens: drafts the model kept;
// rejected_prediction_tokens: drafts it did not, computed but not emitted).
func addSpeculationUsage(usage map[string]interface{}, u *steadyv1.Usage) {
	drafted, accepted := u.GetDraftedTokens(), u.GetAcceptedTokens()
	if drafted == 0 {
		return
	}
	usage["speculation"] = map[string]interface{}{"drafted_tokens": drafted, "accepted_tokens": accepted}
	usage["completion_tokens_details"] = map[string]interface{}{
		"accepted_prediction_tokens": accepted, "rejected_prediction_tokens": drafted - accepted}
}
